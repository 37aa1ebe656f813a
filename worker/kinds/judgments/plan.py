"""From a sift, route or verified decide job to the exact requests it will send (pure).

Every request is prepared (limits checked, body built) before the first is claimed, so a
job that cannot be sent in full is ``rejected`` with nothing sent. The same plans are what
``decisions submit --dry-run`` checks, so it rejects exactly what the worker would.

Steps: ``sift.0``, ``sift.1``, ... (one per packed request, in item order), ``route``,
``decide`` then ``verify.0``, ``verify.1``, ...
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from shared.errors import DecisionProviderError, FieldProblem, JobInvalid
from shared.jobs import DecideJob, RouteJob, SiftJob
from shared.judgments import (
    ROUTE_QUESTION_ID,
    PackLimits,
    item_id,
    pack,
    pack_limits_for,
    route_question,
    sift_question,
    sift_state,
)
from worker.providers import DecisionProvider, DecisionRequest, PreparedRequest, ProviderRegistry

__all__ = [
    "DECIDE_STEP",
    "ROUTE_STEP",
    "PlannedCall",
    "VerifiedPlan",
    "pack_limits",
    "plan_route",
    "plan_sift",
    "plan_verified",
    "sift_step",
    "verify_step",
]

DECIDE_STEP = "decide"  # the decide path's own step: a verified job's first decision is it
ROUTE_STEP = "route"
_ITEM_FIELD = re.compile(r"^questions\.item\.(\d+)\b")


def sift_step(index: int) -> str:
    return f"sift.{index}"


def verify_step(index: int) -> str:
    return f"verify.{index}"


@dataclass(frozen=True)
class PlannedCall:
    """One paid request of a job: its step, provider and exact prepared body."""

    step: str
    provider: DecisionProvider
    prepared: PreparedRequest

    @property
    def question_ids(self) -> tuple[str, ...]:
        return self.prepared.question_ids

    @property
    def provider_name(self) -> str:
        return self.provider.name

    @property
    def model(self) -> str | None:
        return self.prepared.model


@dataclass(frozen=True)
class VerifiedPlan:
    primary: PlannedCall
    verifiers: tuple[PlannedCall, ...]


def pack_limits(provider: DecisionProvider) -> PackLimits:
    """The packing limits by name, tightened by whatever the provider itself declares."""
    named = pack_limits_for(provider.name)
    own = provider.limits
    return PackLimits(
        max_questions=_smaller(named.max_questions, own.max_questions),
        max_question_chars=_smaller(named.max_question_chars, own.max_rendered_question_chars),
        max_context_tokens=named.max_context_tokens,
        max_request_tokens=named.max_request_tokens,
    )


def _smaller(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return a if b is None else b
    return min(a, b)


def _provider(
    providers: ProviderRegistry, name: str | None, model: str | None, job_id: str, prefix: str = ""
) -> DecisionProvider:
    problems = providers.check(name, model)
    if problems:
        raise JobInvalid([FieldProblem(prefix + p.field, p.message) for p in problems], job_id)
    return providers.get(name or providers.default_name)


def _prepare(
    provider: DecisionProvider,
    request: DecisionRequest,
    step: str,
    job_id: str,
    rename: dict[str, str],
) -> PreparedRequest:
    try:
        return provider.prepare(request, step=step)
    except DecisionProviderError as exc:
        if exc.code not in ("invalid_request", "configuration"):
            raise
        field = _job_field(exc.field or "questions", rename)
        # A verifier's limits are not the job's provider's: its refusal says whose they are.
        whose = step.startswith("verify")
        raise JobInvalid([exc.problem(field, whose=whose)], job_id) from None


def _job_field(field: str, rename: dict[str, str]) -> str:
    """A provider's field (``questions.item.3.instructions``) as the job names it."""
    for wire, job_field in rename.items():
        if field == wire or field.startswith(wire + "."):
            return job_field + field[len(wire) :]
    item = _ITEM_FIELD.match(field)
    return f"items.{item[1]}" if item else field


def _tokens_in(value: Any, keys: list[str]) -> set[str]:
    """The image keys whose ``<key>`` token a JSON value holds (in a string or an object key)."""
    text = json.dumps(value, ensure_ascii=False)
    return {key for key in keys if f"<{key}>" in text}


def plan_sift(job: SiftJob, providers: ProviderRegistry) -> list[PlannedCall]:
    provider = _provider(providers, job.provider, job.model, job.id)
    state = sift_state(job.state)
    questions = [
        (item_id(i), sift_question(job.question, item)) for i, item in enumerate(job.items)
    ]
    try:
        groups = pack(state, questions, pack_limits(provider), field="items")
    except JobInvalid as exc:
        raise JobInvalid(exc.problems, job.id) from None
    images = {k: i.data() for k, i in (job.images or {}).items()}
    keys = list(images)
    in_state = _tokens_in(state, keys)
    if images:
        # Every image must be referenced somewhere: a request's unreferenced asset is a 400.
        anywhere = in_state | _tokens_in([q for _, q in questions], keys)
        unused = [FieldProblem(f"images.{k}", f"no <{k}> token references it") for k in keys
                  if k not in anywhere]  # fmt: skip
        if unused:
            raise JobInvalid(unused, job.id)
    calls = []
    for k, group in enumerate(groups):
        step = sift_step(k)
        asked = {questions[i][0]: questions[i][1] for i in group}
        # Each request carries only the images its state and its own items reference.
        used = in_state | _tokens_in(list(asked.values()), keys)
        request = DecisionRequest(
            state=state,
            questions=asked,
            model=job.model,
            call_key=f"{job.id}/{step}",
            assets={key: images[key] for key in keys if key in used} or None,
        )
        calls.append(PlannedCall(step, provider, _prepare(provider, request, step, job.id, {})))
    return calls


def plan_route(job: RouteJob, providers: ProviderRegistry) -> PlannedCall:
    provider = _provider(providers, job.provider, job.model, job.id)
    question = route_question(job.routes, job.instructions).wire()
    request = DecisionRequest(
        state=job.state,
        questions={ROUTE_QUESTION_ID: question},
        model=job.model,
        call_key=f"{job.id}/{ROUTE_STEP}",
        assets=None if job.images is None else {k: i.data() for k, i in job.images.items()},
    )
    rename = {
        f"questions.{ROUTE_QUESTION_ID}.criteria": "routes",
        f"questions.{ROUTE_QUESTION_ID}": "instructions",
    }
    prepared = _prepare(provider, request, ROUTE_STEP, job.id, rename)
    return PlannedCall(ROUTE_STEP, provider, prepared)


def plan_verified(job: DecideJob, providers: ProviderRegistry) -> VerifiedPlan:
    """The decision and its verifications; ``JobInvalid`` unless they are independent."""
    assert job.verify is not None
    spec = job.verify
    questions = {qid: q.wire() for qid, q in job.questions.items()}
    provider = _provider(providers, job.provider, job.model, job.id)
    assets = None if job.images is None else {k: i.data() for k, i in job.images.items()}
    primary = _prepare(
        provider,
        DecisionRequest(
            job.state, questions, job.model, call_key=f"{job.id}/{DECIDE_STEP}", assets=assets
        ),
        DECIDE_STEP,
        job.id,
        {},
    )
    checker_name = spec.provider or job.provider
    checker = _provider(providers, checker_name, spec.model, job.id, prefix="verify.")
    verifiers = []
    for k in range(spec.verifications):
        step = verify_step(k)
        # The same images to every checker, placed for its own model by its provider.
        request = DecisionRequest(
            job.state, questions, spec.model, call_key=f"{job.id}/{step}", assets=assets
        )
        rename = {"model": "verify.model", "provider": "verify.provider"}
        prepared = _prepare(checker, request, step, job.id, rename)
        verifiers.append(PlannedCall(step, checker, prepared))
    if checker.name == provider.name and verifiers[0].prepared.model == primary.model:
        raise JobInvalid(
            [
                FieldProblem(
                    "verify",
                    f"verifies with the decision's own provider and model ({provider.name}, "
                    f"{primary.model}); name another provider or model",
                )
            ],
            job.id,
        )
    return VerifiedPlan(PlannedCall(DECIDE_STEP, provider, primary), tuple(verifiers))
