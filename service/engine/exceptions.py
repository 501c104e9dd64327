"""The engine's errors: what went wrong, in a sentence, with no notion of HTTP. The API maps
each to its status in one place (service/api/error_handlers.py)."""

from __future__ import annotations


class BookNotFoundError(LookupError):
    def __init__(self, book_id: str):
        self.book_id = book_id
        super().__init__(f"no book with id {book_id!r}")


class IndexEmptyError(RuntimeError):
    def __init__(self) -> None:
        super().__init__("the index holds no books yet: run `attend index CATALOG` first")


class NotReadyError(RuntimeError):
    """/readyz: the service cannot answer searches yet (or any more)."""


class JobRunningError(RuntimeError):
    def __init__(self, job_id: str, why: str = "is still running: one job at a time"):
        self.job_id = job_id
        super().__init__(f"re-index job {job_id} {why}")


class WriterBusyError(RuntimeError):
    """Another writer holds the index (an `attend index`, a generation left building): a book
    write waits for it, as a second job does."""


class JobNotFoundError(LookupError):
    def __init__(self, job_id: str):
        super().__init__(f"no re-index job with id {job_id!r}")


class BadCatalogRequestError(ValueError):
    """A re-index request names no usable catalog."""


class UploadTooLargeError(ValueError):
    """An uploaded catalog larger, decompressed, than the bound on uploads."""


class ExplanationUnavailableError(RuntimeError):
    def __init__(self) -> None:
        super().__init__("this service's encoder gives no token embeddings to explain with")
