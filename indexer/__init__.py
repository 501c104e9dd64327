"""Catalog in, vectors out: reads a book catalog, embeds it, and writes keys and values to SQL."""
