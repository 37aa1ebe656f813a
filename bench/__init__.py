"""``make bench`` (``python -m bench``): the worker against its ceilings, side by side, in one run.

- ``direct``: the same decisions straight to the faux server with httpx at the pipeline's
  concurrency, no queue, no ledger: the ceiling of that concurrency.
- ``celery-noop``: a no-op task, one a message, on the same broker and worker settings.
- ``open loop``: single-job messages (one ``Client.submit`` a job) offered at a fixed rate for
  a fixed time through a default ``decisions worker`` (the loop pool), and ``direct`` at the
  same rate and in-flight limit (``bench.openloop``), at 200 ms and 1 s; ``--long`` for more.
- ``pipeline``: submit to terminal message through a real ``decisions worker`` process, with
  the SQLite and with the PostgreSQL ledger.

Each at faux latency 0 ms and 200 ms; plus worker RSS with 1,000 decisions in flight and the
producer's submit rate for a 100,000-job batch. Redis database 15, a PostgreSQL schema of
its own, loopback only; every loop is bounded. Results: a table, and JSON in bench/results/.
"""
