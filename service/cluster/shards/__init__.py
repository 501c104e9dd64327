"""What holds a catalog's keys on shards: each shard's slice (`shard.py`), the router's keys over
them (`router.py`), and the shards on Ray Serve (`deployments.py`). Below the engine: the engine
asks these keys as it asks its own, and nothing here calls the engine or the API."""
