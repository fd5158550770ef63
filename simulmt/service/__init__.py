"""The live translation service (``simulmt serve``): ``hub`` (one engine, every client's stream, its own
thread), ``app`` (the Starlette app: WebSocket protocol, health, metrics, page), ``server`` (the command)."""
