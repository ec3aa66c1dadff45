"""The streaming model-API reverse proxy, its server and CLI."""
