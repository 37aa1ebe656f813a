"""The producer's side: validate and submit jobs, read their replies. Needs ``shared`` only.

    client = Client()                                   # settings from DECISIONS_*
    report = client.submit_batch(jobs, reply_to="claims-replies")
    for reply in client.replies("claims-replies", job_ids=report.job_ids):
        ...                                             # one terminal message per job

Invalid jobs are never put on the queue: their ``rejected`` message, naming each bad field,
goes straight to the reply stream, and the rest of the batch goes on.

With a Redis broker each job's intake is recorded before its message is published
(``shared.intake``): a message the broker loses is republished by the workers' reaper, and
no producer has to resubmit anything. A publish that fails raises ``SubmitFailed``, naming
the jobs queued before it; the others' records are withdrawn, so no reaper runs them later.

    estimate = client.estimate(jobs, reply_to="claims-replies")   # a dry run: nothing sent
    estimate.total.requests, estimate.total.by_provider["parallel"].cost_usd
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from celery import Celery

from shared import keys, tracing
from shared.celery_producer import producer_app
from shared.chunk_publisher import ChunkPublisher, MessageSender
from shared.errors import FieldProblem, JobInvalid
from shared.estimate import ESTIMATE_TTL_S, Estimate, EstimateReport, estimate_report
from shared.images import ref_problems
from shared.intake import IntakeBook, intake_member, records_intake
from shared.job_parsing import job_deadline, parse_job
from shared.job_wire import stamp_job, wire_text
from shared.jobs import JOB_TYPES, DecideJob, Job
from shared.limits import Limits
from shared.message_size import MessageChunks, job_cost, oversize_problem
from shared.packs import pack_key
from shared.prices import Price
from shared.redis_connect import redis_client
from shared.replies import Reply
from shared.reply_reader import terminal_replies
from shared.settings import Settings, get_settings
from shared.streams import RedisPublisher, ReplyPublisher
from shared.submit_rejections import publish_submit_rejection
from shared.submit_report import SubmitReport

__all__ = ["PRODUCER_SERVICE", "Client", "JobChecker", "SubmitReport"]

#: Extra submit-time checks (e.g. the worker's provider registry: is this model served?).
JobChecker = Callable[[Job], list[FieldProblem]]


class _RejectionUnpublished(Exception):
    """Publishing a rejected job's message raised (raised from that error)."""


#: The producer's trace: its service name and the span every submitted message continues.
PRODUCER_SERVICE = "decision-producer"
SUBMIT_SPAN = "decisions.submit"

log = logging.getLogger(__name__)


class Client:
    def __init__(
        self,
        settings: Settings | None = None,
        *,
        checker: JobChecker | None = None,
        redis_client: redis.Redis | None = None,
        celery_app: Celery | None = None,
        publisher: ReplyPublisher | None = None,
        count_rejections: bool | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        # Lines rejected at submit are counted per batch in Redis (``shared.submit_rejections``)
        # when replies go there; the embedded run's publisher is memory, its Redis absent.
        self.count_rejections = publisher is None if count_rejections is None else count_rejections
        self.checker = checker
        self._redis = redis_client
        self._celery = celery_app
        self._publisher = publisher
        self._limits: Limits | None = None
        self._intake: IntakeBook | None = None

    # --- connections -----------------------------------------------------------------
    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis_client(self.settings.redis_url)
        return self._redis

    @property
    def celery(self) -> Celery:
        if self._celery is None:
            self._celery = producer_app(self.settings)
        return self._celery

    @property
    def limits(self) -> Limits:
        if self._limits is None:
            self._limits = Limits.from_settings(self.settings)
        return self._limits

    @property
    def publisher(self) -> ReplyPublisher:
        if self._publisher is None:
            self._publisher = RedisPublisher(self.redis, ttl_s=self.settings.publish_marker_ttl_s)
        return self._publisher

    @property
    def intake(self) -> IntakeBook | None:
        """Where each job's intake is recorded before publishing (None: not a Redis broker)."""
        if self._intake is None and records_intake(self.settings.broker_url):
            self._intake = IntakeBook(self.redis)
        return self._intake

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()

    # --- validation ------------------------------------------------------------------
    def validate(
        self, raw: Any, *, reply_to: str | None = None, now: datetime | None = None
    ) -> Job:
        """A submittable job, stamped with its submission time; JobInvalid names bad fields."""
        return self._checked(raw, reply_to, now)[0]

    def _checked(
        self, raw: Any, reply_to: str | None, now: datetime | None = None
    ) -> tuple[Job, dict[str, Any] | None]:
        """``validate``, and the stamped dict the job was validated from (None: not a dict)."""
        now = now or datetime.now(UTC)
        stamped: dict[str, Any] | None = None
        if isinstance(raw, JOB_TYPES):  # its dump is ours, plain JSON; reply_to is not applied
            stamped = stamp_job(raw.model_dump(mode="json", exclude_none=True), None, now)
        elif isinstance(raw, dict):
            stamped = stamp_job(raw, reply_to, now)
        # The input limits and strict JSON first (shared.limits), as the worker's guard does.
        job = parse_job(raw if stamped is None else stamped, self.limits)
        problems = self._deadline_problems(job, now)
        # An image ref outside the allowlisted stores: the worker would refuse to fetch it.
        problems += ref_problems(getattr(job, "images", None), self.settings.image_stores)
        if self.checker is not None:
            problems.extend(self.checker(job))
        if problems:
            raise JobInvalid(problems, job.id)
        if job.submitted_at is None:  # a JSON text, or a naive now: stamped once parsed
            job = job.model_copy(update={"submitted_at": now})
        return job, stamped

    def _deadline_problems(self, job: Job, now: datetime) -> list[FieldProblem]:
        ceiling = self.settings.deadline_ceiling_s
        problems = []
        if job.timeout_s is not None and job.timeout_s > ceiling:
            problems.append(
                FieldProblem(
                    "timeout_s", f"{job.timeout_s:g} s is over the ceiling of {ceiling:g} s"
                )
            )
        if job.deadline is not None:
            if job.deadline <= now:
                problems.append(FieldProblem("deadline", "is already past"))
            elif job.deadline > now + timedelta(seconds=ceiling):
                problems.append(FieldProblem("deadline", f"is more than {ceiling:g} s away"))
        return problems

    # --- submitting ------------------------------------------------------------------
    def submit(self, job: Any, *, reply_to: str | None = None) -> SubmitReport:
        return self.submit_batch([job], reply_to=reply_to)

    def submit_batch(
        self,
        jobs: Iterable[Any],
        *,
        reply_to: str | None = None,
        chunk_size: int | None = None,
        on_progress: Callable[[int], None] | None = None,
        pack: bool = False,
    ) -> SubmitReport:
        """Validate and enqueue ``jobs`` in chunks of ``chunk_size`` per Celery message, each
        under ``settings.max_message_bytes`` on the queue (a job too big for a message of its
        own is rejected: ``shared.message_size``). ``chunk_size`` None is
        ``settings.chunk_size``; below 1 it is a ``ValueError``.

        With ``pack`` (or a job's own ``pack``), decide jobs of one batch about the same
        state for the same provider go in messages of their own, up to
        ``settings.pack_chunk_size`` a message, for the worker to pack into shared requests
        (``shared.packs``). Messages are published on a thread while the next chunk is
        validated (pipelined: ``shared.chunk_publisher``); ``on_progress`` is called from
        that thread, with each published chunk's size, in order.

        Traced (``shared.tracing``, when an endpoint is set): one ``decisions.submit`` span,
        whose context every message carries in its headers to the worker.

        A message whose publish fails (the broker unreachable, the intake Redis down) raises
        ``SubmitFailed`` from that error: the jobs queued before it, those of that message
        (``unconfirmed``: it may have reached the broker) and those never sent
        (``shared.chunk_publisher.MessageSender`` says why the records go either way). So
        does a rejected message the streams Redis refuses; that job is in none of the lists
        (submitted again, it is rejected again), and the messages already handed to the
        publishing thread are sent and counted before the error is raised.
        """
        # A caller's mistake (ValueError, as shared.calibration's): 0 was the default, -5 was 1.
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be 1 or more (None: the default), not {chunk_size}")
        tracing.configure(self.settings, service_name=PRODUCER_SERVICE)
        with tracing.span(SUBMIT_SPAN, kind="producer", **{"messaging.system": "celery"}) as span:
            report = self._submit_batch(
                jobs, reply_to, chunk_size, on_progress, pack, tracing.inject({}) or None
            )
            tracing.annotate(span, **{"decisions.jobs": len(report.job_ids)})
            return report

    def _submit_batch(
        self,
        jobs: Iterable[Any],
        reply_to: str | None,
        chunk_size: int | None,
        on_progress: Callable[[int], None] | None,
        pack: bool,
        headers: dict[str, str] | None,
    ) -> SubmitReport:
        report = SubmitReport()
        sender = MessageSender(self.celery, self.intake, headers)
        publisher = ChunkPublisher(self.celery, sender, on_sent=on_progress)
        try:
            self._queue_all(publisher, report, jobs, reply_to, chunk_size, pack)
        except _RejectionUnpublished as exc:
            # The streams Redis refused a rejected message: a submit failure as a message's
            # is (it raised a bare redis error, found by an attack), and told once the block
            # has ended, so that the messages handed to the publishing thread (which it
            # publishes before it stops) are counted queued or unconfirmed, exactly.
            raise sender.failure(report) from exc.__cause__
        except Exception as exc:
            if exc is not publisher.error:
                raise  # the caller's own (its jobs iterator, a bug), as it was raised
            raise sender.failure(report) from exc
        return report

    def _queue_all(
        self,
        publisher: ChunkPublisher,
        report: SubmitReport,
        jobs: Iterable[Any],
        reply_to: str | None,
        chunk_size: int | None,
        pack: bool,
    ) -> None:
        cap = self.settings.max_message_bytes
        # Each job's intake member and JSON text (``wire_text``); packable jobs by pack key.
        chunks: MessageChunks[tuple[str, str]] = MessageChunks(
            chunk_size or self.settings.chunk_size, cap
        )
        packs: MessageChunks[tuple[str, str]] = MessageChunks(self.settings.pack_chunk_size, cap)
        with publisher:

            def put(message: list[tuple[str, str]]) -> None:
                publisher.put(message)
                report.messages += 1

            for position, raw in enumerate(jobs):
                try:
                    job, text, cost = self._wired(raw, reply_to, pack)
                except JobInvalid as exc:
                    try:
                        publish_submit_rejection(
                            self.publisher,
                            self.redis if self.count_rejections else None,
                            raw,
                            exc,
                            reply_to,
                        )
                    except Exception as error:
                        raise _RejectionUnpublished from error
                    if exc.job_id is None:
                        report.rejected_lines[position] = exc.problems
                    else:
                        report.rejected[exc.job_id] = exc.problems
                    report.rejections += 1
                    continue
                report.job_ids.append(job.id)
                self._note_deadline(report, job)
                key = pack_key(job, self.settings.default_provider)
                held = chunks if key is None else packs
                for message in held.add(key, (intake_member(job.reply_to, job.id), text), cost):
                    put(message)
            for message in (*chunks.drain(), *packs.drain()):
                put(message)

    def _wired(self, raw: Any, reply_to: str | None, pack: bool) -> tuple[Job, str, int]:
        """A checked job (packed if asked), its JSON text as sent and its cost in a message
        (``shared.message_size``); JobInvalid also when no message could hold it."""
        job, stamped = self._checked(raw, reply_to)
        packed = self._packed(job, pack)
        if packed is not job:
            job = packed
            stamped = None if stamped is None else {**stamped, "pack": True}
        text = wire_text(job, stamped)
        cost = job_cost(text)
        problem = oversize_problem(cost, self.settings.max_message_bytes)
        if problem is not None:
            raise JobInvalid([FieldProblem("(job)", problem)], job.id)
        return job, text, cost

    def _note_deadline(self, report: SubmitReport, job: Job) -> None:
        deadline = job_deadline(
            job,
            default_s=self.settings.default_timeout_s,
            ceiling_s=self.settings.deadline_ceiling_s,
        )
        if report.latest_deadline is None or deadline > report.latest_deadline:
            report.latest_deadline = deadline

    @staticmethod
    def _packed(job: Job, pack: bool) -> Job:
        # A verified decision is never packed: its verifications are its own requests.
        if pack and isinstance(job, DecideJob) and job.verify is None and not job.pack:
            return job.model_copy(update={"pack": True})
        return job

    # --- cost before submit -----------------------------------------------------------
    def estimate(
        self,
        jobs: Iterable[Any],
        *,
        reply_to: str | None = None,
        prices: dict[str, Price] | None = None,
        store: bool = True,
        pack: bool = False,
    ) -> EstimateReport:
        """Validate every job and estimate the requests and cost it will send
        (``shared.estimate``), packed as ``submit_batch(pack=...)`` would pack them. Nothing
        is sent, queued or published; with ``store`` each named batch's estimate is kept in
        Redis for ``decisions ledger status --batch``."""
        report = estimate_report(
            jobs,
            # As submit_batch checks them: a job too big for a message is rejected here too.
            lambda raw: self._wired(raw, reply_to, pack)[0],
            self.settings,
            prices=prices,
        )
        if store:
            for batch, estimate in report.batches.items():
                self.redis.set(keys.batch_estimate(batch), estimate.to_json(), ex=ESTIMATE_TTL_S)
        return report

    def dry_run(
        self,
        jobs: Iterable[Any],
        *,
        reply_to: str | None = None,
        store: bool = True,
        pack: bool = False,
    ) -> EstimateReport:
        """``estimate``: what ``submit_batch`` would send, without sending it."""
        return self.estimate(jobs, reply_to=reply_to, store=store, pack=pack)

    def stored_estimate(self, batch: str) -> Estimate | None:
        """The estimate stored for ``batch`` (None if none was)."""
        raw = self.redis.get(keys.batch_estimate(batch))
        try:
            return None if raw is None else Estimate.from_json(raw)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            # Not one this release wrote (an older shape, a hand edit): as if none was stored.
            log.warning("the stored estimate of batch %r cannot be read; ignored", batch[:80])
            return None

    # --- replies ---------------------------------------------------------------------
    def replies(
        self,
        stream: str,
        *,
        job_ids: Iterable[str] | None = None,
        follow: bool = False,
        timeout_s: float | None = None,
        include_resolutions: bool = False,
    ) -> Iterator[Reply]:
        """Terminal messages on ``stream``, each job's once (``shared.reply_reader``)."""
        return terminal_replies(
            self.redis,
            stream,
            job_ids=job_ids,
            follow=follow,
            timeout_s=timeout_s,
            include_resolutions=include_resolutions,
        )
