"""Settings the whole suite asks for explicitly."""

from __future__ import annotations

import os

from tests.support.parallel import own_redis_per_worker

# The suite's workers and registries answer provider and runtime ``faux`` in process when a
# test gives no ``faux_url``: a production worker has no faux unless asked
# (tests/integration/test_no_fakes.py runs one as production does). Set before any test
# module builds its Settings; subprocesses get it from tests.support.processes.decisions_env.
os.environ.setdefault("DECISIONS_FAUX_IN_PROCESS", "1")

# Under pytest-xdist, this worker's own redis-server, before any test module reads the port.
own_redis_per_worker()
