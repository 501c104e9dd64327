"""Attend's REST API: search, books and health over the attention core."""
