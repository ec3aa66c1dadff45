"""The realtime API: client secrets, the WebSocket relay and its per-response billing."""
