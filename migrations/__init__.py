"""Alembic migration history of Attend's tables (indexer/schema.py)."""
