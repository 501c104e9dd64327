"""The service's settings room: `ServiceSettings` (settings.py, read once per process from the
environment and `.env`) and the heads' vocabulary and its parsing (head_weights.py), which the
settings, the API's parameters and the engine share. Below the engine and the API: it imports
the indexer's settings and nothing else of the product.
"""
