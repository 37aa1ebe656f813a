"""Process plumbing: the asyncio loop and the pool on it, context, GC, logs, liveness, guard."""

__all__ = [
    "batching",
    "broker",
    "context",
    "durability",
    "faults",
    "gc_policy",
    "guard",
    "inflight",
    "liveness",
    "logs",
    "loop",
    "pool",
]
