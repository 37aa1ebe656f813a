"""The worker's HTTP stack: one connection pool on plain asyncio streams for every paid call."""

__all__ = [
    "aio_network",
    "body",
    "connection_pool",
    "cookies",
]
