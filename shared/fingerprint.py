"""A job's fingerprint: what makes two submissions the same logical job."""

from __future__ import annotations

from shared.canonical import digest_of
from shared.jobs import DEFAULT_TOOL_CALLS_PER_JOB, DEFAULT_TOOL_CALLS_PER_REPLY, AnyJob

__all__ = ["job_fingerprint"]


def job_fingerprint(job: AnyJob) -> str:
    """What makes two submissions the same logical job.

    Transport fields are left out: the same job resubmitted later, or to another reply stream,
    or with packing, audits or a budget turned on or off, is the same job, and gets its
    stored outcome there.
    """
    # The audit rate only decides whether a reviewer also sees the result, and a budget
    # whether it may be sent: the same job (and one stored before either existed).
    body = job.model_dump(
        mode="json",
        exclude={
            "submitted_at", "deadline", "timeout_s", "reply_to", "pack", "audit_rate",
            "budget_usd",
        },
    )
    images = body.get("images")
    if isinstance(images, dict):
        # An inline image's ``ref: null`` is left out, so a job stored before refs existed
        # keeps its fingerprint.
        body["images"] = {
            k: {f: v for f, v in i.items() if v is not None} for k, i in images.items()
        }
    work = body.get("work")
    if isinstance(work, dict):
        # The tool-call bounds at their defaults are left out, so a job stored before they
        # existed keeps its fingerprint.
        for name, default in _TOOL_BOUND_DEFAULTS.items():
            if work.get(name) == default:
                del work[name]
    return digest_of(body)


_TOOL_BOUND_DEFAULTS = {
    "max_tool_calls_per_reply": DEFAULT_TOOL_CALLS_PER_REPLY,
    "max_tool_calls": DEFAULT_TOOL_CALLS_PER_JOB,
}
