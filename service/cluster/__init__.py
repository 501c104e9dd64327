"""Attend past one machine: shards, the router's keys on them, and the Ray Serve deployments.
The only code that imports ray."""
