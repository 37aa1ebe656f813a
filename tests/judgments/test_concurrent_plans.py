"""Two deliveries of one sift job at once, planned otherwise (a rolling deploy that changed
the default provider, so the items are packed otherwise): no item is sent twice (found by an
attack). The first delivery's sift.0 is refused by the budget, so its rows are not a prefix of
its steps; the operator raises the budget; the second delivery claims its own sift.0 (all 350
items) while the first claims sift.1 (items 100 to 199). A check of the job's calls before
the first claim, outside the claim's transaction, let both go; the ledger now refuses, in the
claim's transaction, a claim for a job holding a call its plan does not make."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from tests.judgments.support import settings_for, sift_job
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Claim, Ledger
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxServer

BATCH = "gap-batch"


def test_two_deliveries_at_once_planned_otherwise_send_no_item_twice(
    tmp_path: Path, server: FauxServer
) -> None:
    second_claiming = threading.Event()
    second_claimed = threading.Event()

    class First(Ledger):
        def claim(self, **kwargs: Any) -> Claim:
            if kwargs["step"] == "sift.1":
                self.set_budget(BATCH, 1.0)  # the operator, after sift.0 was refused
                assert second_claiming.wait(20)
            return super().claim(**kwargs)

        def finish_job(self, **kwargs: Any) -> Any:
            second_claimed.wait(20)
            return super().finish_job(**kwargs)

    class Second(Ledger):
        def claim(self, **kwargs: Any) -> Claim:
            second_claiming.set()
            time.sleep(0.3)  # the first's sift.1 claim lands meanwhile
            try:
                return super().claim(**kwargs)
            finally:
                second_claimed.set()

    job = sift_job("gap", [f"message {i:04d}" for i in range(350)], batch=BATCH)
    one = settings_for(tmp_path, server.url, default_provider="parallel")
    two = settings_for(
        tmp_path, server.url, default_provider="faux", max_price_per_mtok_usd={"faux": 0.1}
    )
    first = First.from_settings(one)
    first.migrate()
    first.set_budget(BATCH, 0.0005)  # under Parallel's 0.001 a request: sift.0 refused
    second = Second.from_settings(two)

    def run(ledger: Ledger, settings: Any) -> None:
        runner = Runner(
            settings=settings, ledger=ledger,
            providers=ProviderRegistry.from_settings(settings), sink=MemorySink(),
        )  # fmt: skip
        asyncio.run(runner.run_one(dict(job)))

    threads = [
        threading.Thread(target=run, args=(first, one)),
        threading.Thread(target=run, args=(second, two)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    sent = server.provider.calls()
    # Items 100 to 199 are in the first's sift.1 and in the second's sift.0 (all 350).
    assert not ("gap/sift.1" in sent and "gap/sift.0" in sent), f"items sent twice: {sent}"
    # The first claimed first and goes on with its plan; the second was refused its claim.
    assert sent == {"gap/sift.1": 1, "gap/sift.2": 1, "gap/sift.3": 1}
    assert {c.step for c in first.calls("gap")} == {"sift.1", "sift.2", "sift.3"}
