"""Recovery: claims whose worker died, jobs the broker lost, reply streams that lost entries."""

__all__ = [
    "intake",
    "reaper",
    "republish",
]
