"""The encoder's defaults, in a module that imports nothing: settings read them
(indexer/settings.py) without importing torch, so a command that fails on its input (`attend
index` of a bad catalog) answers before torch's seconds of loading."""

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Where the ONNX backend keeps its one-time export; relative paths are from the working folder.
DEFAULT_ONNX_CACHE_DIR = ".attend-cache/onnx"
