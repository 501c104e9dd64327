"""One key per language whatever standard a catalog writes its code in: ISO 639-1 (`fr`),
639-2 bibliographic as MARC writes it (`fre`) or terminological (`fra`), 639-3, or a BCP 47
tag with a region (`fr-CA`, Goodreads' `en-US`): all `fr`, as langcodes reads them. So a filter
for `fr` keeps the books a library's MARC export says are `fre`, and the index's statistics
count `eng` and `en-US` as one language. What a catalog wrote is stored and shown as written;
only comparisons and counts go by the key."""

from __future__ import annotations

from functools import lru_cache

import langcodes


@lru_cache(maxsize=4096)
def language_key(code: str | None) -> str:
    """The language `code` names, as its shortest ISO 639 code ("fre", "fra", "fr-CA" → "fr");
    a text that is no language tag ("English", "Français") as itself, case-folded; "" for
    none."""
    text = (code or "").strip()
    if not text:
        return ""
    try:
        language = langcodes.Language.get(langcodes.standardize_tag(text.replace("_", "-")))
    except ValueError:  # langcodes' LanguageTagError: no language tag
        return text.casefold()
    return language.language or text.casefold()
