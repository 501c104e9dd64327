"""The HTTP API: the app, routes, schemas and middleware. It calls the engine, never the reverse."""
