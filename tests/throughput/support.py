"""What the throughput tests share: their Redis database."""

from __future__ import annotations

#: Redis database of tests/throughput (the bench uses 15).
REDIS_DB = 13
