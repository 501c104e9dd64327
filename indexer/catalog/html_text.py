"""A description written in HTML (Calibre's `comments`: `<div><p>A textbook on …</p></div>`) as
the plain text a reader sees: tags dropped, entities decoded, paragraphs and line breaks kept as
line ends, runs of spaces one space. The model embeds words, not markup, and the page shows the
description as text.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# a tag's opening: `<p`, `</div`, `<br/` (a `<` before a space or a digit is no tag: "a < b")
_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*[\s/>]")
# tags that end a line of the text as a reader sees it
_BREAKS = frozenset(
    {"br", "p", "div", "li", "ul", "ol", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote"}
)
_UNSEEN = frozenset({"script", "style", "head", "title"})  # their text is not the page's
_SPACES = re.compile(r"\s+")


def looks_like_html(text: str) -> bool:
    """Whether `text` holds a tag."""
    return _TAG.search(text) is not None


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _UNSEEN:
            self._hidden += 1
        elif tag in _BREAKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _UNSEEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag in _BREAKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:  # a line end in HTML's source is a space; the tags break lines
            self.parts.append(data.replace("\n", " "))


def html_to_text(html: str) -> str:
    """The text of `html`: one line per paragraph, no blank lines, no markup."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parser.parts).split("\n"))
    return "\n".join(line for line in lines if line)
