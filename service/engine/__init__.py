"""The search engine: the served index, batching, heads, similar books, explanations and following
generations. Plain dataclasses and exceptions; no fastapi, starlette or ray."""
