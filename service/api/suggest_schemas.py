"""The schemas of `GET /suggest`: completions of what a reader is typing."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from service.api.search_schemas import MAX_SHOWN_AUTHORS, shown_title


class SuggestParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    q: str = Field(
        min_length=1,
        max_length=200,
        description="What the reader has typed so far: its last word is completed as a prefix, "
        "the words before it must be whole (accents, case and punctuation aside).",
    )
    k: int = Field(8, ge=1, le=20, description="Titles at most, and authors at most.")


class TitleSuggestionOut(BaseModel):
    id: str
    title: Annotated[str, AfterValidator(shown_title)]
    authors: Annotated[list[str], AfterValidator(lambda names: names[:MAX_SHOWN_AUTHORS])] = Field(
        description=f"The book's first {MAX_SHOWN_AUTHORS} authors at most."
    )
    year: int | None


class AuthorSuggestionOut(BaseModel):
    name: str = Field(description="As the catalog writes it.")
    books: int = Field(description="The catalog's books by this name.")


class SuggestResponse(BaseModel):
    query: str
    titles: list[TitleSuggestionOut] = Field(
        description="Books whose title holds the query's words, its last one as a prefix: a "
        "work once (its most read edition), the most read first (the readers' rating counts, "
        "else the catalog's order)."
    )
    authors: list[AuthorSuggestionOut] = Field(
        description="Author names holding the query's words so, the most books first."
    )
