"""Attend past one machine: the shards holding the keys (`shards/`, below the engine) and the
Ray Serve application that serves the API over them (`ray_serve.py`, above the API). The only
code that imports ray."""
