"""Labels: what a reviewer's answer says about the machine's answer it replaced or checked.

A resolution of an escalation that carries machine answers yields one ``Label`` per
question the machine answered (a value, not refused): the machine's answer with its
probability of that answer and its confidence, the person's answer, and whether they agree.
A menu escalation that carries the machine's pick (``context["pick"]``) yields one label,
question ``pick``, comparing the options picked. Pure: ``shared.escalations`` computes the
labels when it resolves and appends them, in the same Lua call, to the label stream
(``keys.LABEL_STREAM``), from which a worker (or ``decisions calibration``) stores them in
the ledger: a reviewer's process (a producer, the console) needs no ledger access.

Audits (``audit_rate`` on a decide job): ``audited`` picks the jobs from a hash of the job
id, so every delivery and every replay picks the same ones. An audit label's ``weight`` is
``1 / audit_rate`` (it stands for that many results); an escalation's is 1.

Bounds: a ``Label`` refuses, naming the field, a probability or confidence that is not a
share in [0, 1] (NaN and the infinities included) and a weight outside [``MIN_WEIGHT``,
``MAX_WEIGHT``] (``shared.calibration``: the labels its figures can count). Such a label
could never count, and stored it would only be left out, or (a NaN on PostgreSQL, which its
``weight > 0`` let through) be read back as a number. A resolution whose machine answer
carries such numbers, or an audit at a rate no weight follows from, still resolves: without
the labels that cannot be made, and saying so in the log.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.calibration import MAX_WEIGHT, MIN_WEIGHT
from shared.limits import MAX_ID_CHARS
from shared.replies import Answer, EscalationMessage, Receipt

__all__ = [
    "AUDIT_REASON",
    "PICK_QUESTION",
    "Label",
    "LabelSource",
    "audit_weight",
    "audited",
    "encode",
    "labels_of",
    "refused_fields",
]

AUDIT_REASON: Final = "audit"
PICK_QUESTION: Final = "pick"
LabelSource = Literal["audit", "escalation"]
_HASH_SPACE: Final = 2**64
_log = logging.getLogger(__name__)

#: A probability or a confidence: a share, and a finite one (NaN would compare false with
#: every bound, so it is refused by name, as the infinities are).
_Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


def audited(job_id: str, rate: float | None) -> bool:
    """Whether a job with this id is audited at ``rate``: its id's SHA-256 (first 8 bytes, a
    uniform number in [0, 1)) below the rate. The same answer on every machine and replay."""
    if not rate:
        return False
    digest = hashlib.sha256(f"audit:{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _HASH_SPACE < rate


def audit_weight(rate: float | None) -> float:
    """What an audit label at ``rate`` weighs: ``1 / rate``, the results it stands for (1 when
    the escalation names no rate). ``ValueError``, naming ``audit_rate``, for a rate no label
    weight follows from: not a number in (0, 1], or below ``1 / MAX_WEIGHT``.

    A job's ``audit_rate`` may be any number in [0, 1] (``shared.jobs``; no setting bounds
    it), down to ``5e-324``, whose inverse is infinite. The heaviest weight is therefore
    ``MAX_WEIGHT``, the inverse of the smallest rate whose labels can count (one in a
    billion): a rarer audit picks next to no job, and its label, standing for billions of
    results, would swamp every other label of its group."""
    if rate is None:
        return 1.0
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        raise ValueError(f"audit_rate is a {type(rate).__name__}, not a number")
    if not 0 < rate <= 1:  # NaN too
        raise ValueError(f"audit_rate {rate!r} is not a share in (0, 1]")
    weight = 1.0 / rate
    if weight > MAX_WEIGHT:
        raise ValueError(
            f"audit_rate {rate!r} is below one in {MAX_WEIGHT:.0e}: its labels would each "
            f"stand for {weight:.3g} results"
        )
    return weight


#: A label's names are ids: the ledger indexes them, and PostgreSQL refuses an index row of
#: over 8 KB (as an OperationalError, which reads as an outage: found by an attack, one
#: label naming a 16,000-character model held back every label after it).
_Name = Annotated[str, Field(max_length=MAX_ID_CHARS)]


class Label(BaseModel):
    """One labelled machine answer, as the label stream carries it and the ledger stores it."""

    model_config = ConfigDict(extra="forbid")

    job_id: _Name
    batch: _Name | None = None
    question_id: _Name
    question_type: _Name = Field(..., description="noul, choice, score or menu")
    provider: _Name | None = None
    model: _Name | None = Field(None, description="as the receipt names it")
    machine_answer: Any = None
    probability: _Share | None = Field(None, description="the machine's, of its own answer")
    confidence: _Share | None = None
    human_answer: Any = None
    correct: bool
    reviewer: _Name
    source: LabelSource
    reason: _Name
    # Bounded as ``shared.calibration.countable`` counts (``audit_weight`` says why these).
    weight: float = Field(
        1.0,
        ge=MIN_WEIGHT,
        le=MAX_WEIGHT,
        allow_inf_nan=False,
        description="how many answers the label stands for: 1 / audit_rate for an audit",
    )


def refused_fields(error: ValidationError) -> list[str]:
    """The fields of ``Label`` that ``error`` refused, each once: what a log may say of a
    refused label. Never its values (a reviewer's answer is one), nor a key no ``Label`` has
    (that is the producer's text)."""
    names: list[str] = []
    for problem in error.errors():
        loc = problem["loc"]
        name = loc[0] if loc else None
        if isinstance(name, str) and name in Label.model_fields and name not in names:
            names.append(name)
    return names


def labels_of(
    escalation: EscalationMessage, resolved: Any, reviewer: str
) -> list[Label]:
    """The labels a checked resolution (``shared.resolutions.check_resolution``'s answer)
    yields: none when the escalation carries no machine answer."""
    source: LabelSource = "audit" if escalation.reason == AUDIT_REASON else "escalation"
    try:
        weight = audit_weight(escalation.context.get("audit_rate")) if source == "audit" else 1.0
    except ValueError as exc:
        # Labels no figure could count; the reviewer's answer must resolve the audit all the
        # same (this runs inside the resolution), so it does, making none.
        _log.warning("no labels made for job %s: %s", escalation.job_id, exc)
        return []
    common = {
        "job_id": escalation.job_id,
        "batch": escalation.batch,
        "reviewer": reviewer,
        "source": source,
        "reason": escalation.reason,
        "weight": weight,
    }
    if escalation.kind == "menu":
        return _pick_label(escalation, resolved, common)
    # A sift's or route's questions are per item or per route, not a question id that recurs
    # across jobs: they are not labelled (yet).
    if escalation.kind != "decide" or not isinstance(resolved, dict) or not escalation.answers:
        return []
    questions: dict[str, Any] = escalation.context.get("questions", {})
    out = []
    for qid, answer in sorted(escalation.answers.items()):
        question = questions.get(qid)
        if qid not in resolved or not isinstance(question, dict):
            continue
        machine = _machine_value(answer, question)
        if machine is None:
            continue
        receipt = _receipt_for(escalation, qid)
        human = resolved[qid]
        try:
            label = Label(
                question_id=qid,
                question_type=answer.type,
                provider=receipt.provider if receipt else None,
                model=receipt.model if receipt else None,
                machine_answer=machine,
                probability=_own_probability(answer),
                confidence=answer.confidence,
                human_answer=human,
                correct=_same(machine, human),
                **common,
            )
        except ValidationError as exc:
            # The machine's own numbers out of bounds (a NaN probability): a label no figure
            # could count. The others, and the resolution, go ahead without it.
            _log.warning(
                "no label made for job %s, question %s: %s out of bounds",
                escalation.job_id,
                qid,
                ", ".join(refused_fields(exc)),
            )
            continue
        out.append(label)
    return out


def _machine_value(answer: Answer, question: dict[str, Any]) -> Any:
    """The machine's answer in the terms a reviewer answers in; None: it gave none."""
    if answer.refused or answer.value is None:
        return None
    if answer.type == "score":
        levels = list(question.get("criteria") or [])
        return levels.index(answer.label) if answer.label in levels else None
    return answer.value


def _own_probability(answer: Answer) -> float | None:
    """The machine's probability of the answer it gave: a noul's ``probability`` is of yes,
    so a "no" at 0.1 was given at 0.9 (calibration compares it with how often it is right)."""
    p = answer.probability
    if p is None or answer.type != "noul" or answer.value is not False:
        return p
    return round(1.0 - p, 12)  # 1 - 0.04 is 0.96, not 0.9600000000000001


def _same(machine: Any, human: Any) -> bool:
    # bool is an int: True must not equal a score of 1.
    return type(machine) is type(human) and bool(machine == human)


def _receipt_for(escalation: EscalationMessage, qid: str) -> Receipt | None:
    """The receipt of the call that gave this answer: a sift item's own request, else the
    decision (``decide``), else the first answered call."""
    step = "decide"
    for item in escalation.items or []:
        if f"item.{item.index}" == qid and item.step:
            step = item.step
    answered = [r for r in escalation.receipts if r.status == "answered"]
    for receipt in answered:
        if receipt.step == step:
            return receipt
    return answered[0] if answered else None


def _pick_label(
    escalation: EscalationMessage, resolved: Any, common: dict[str, Any]
) -> list[Label]:
    pick = escalation.context.get("pick")
    if not isinstance(pick, dict) or not isinstance(resolved, dict):
        return []
    machine, human = pick.get("call"), resolved.get("call")
    if not isinstance(machine, str) or not isinstance(human, str):
        return []
    runtime = escalation.context.get("runtime") or {}
    step = pick.get("step")
    receipt = next(
        (r for r in escalation.receipts if r.step == step), None
    ) if step else None
    return [
        Label(
            question_id=PICK_QUESTION,
            question_type="menu",
            provider=receipt.provider if receipt else runtime.get("provider"),
            model=(receipt.model if receipt else None) or runtime.get("model"),
            machine_answer=machine,
            human_answer=human,
            # The option is what is labelled: the same option with other arguments agrees.
            correct=machine == human,
            **common,
        )
    ]


def encode(labels: list[Label]) -> str:
    """The label stream entry's payload."""
    return json.dumps([label.model_dump(mode="json") for label in labels], ensure_ascii=False)
