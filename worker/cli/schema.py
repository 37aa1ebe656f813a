"""``decisions schema job|reply``: the JSON Schemas of the wire contract."""

from __future__ import annotations

import json
from enum import StrEnum

import typer
from pydantic import TypeAdapter

from shared.jobs import Job
from shared.replies import Reply

__all__ = ["register"]


class Which(StrEnum):
    job = "job"
    reply = "reply"


def register(app: typer.Typer) -> None:
    @app.command("schema")
    def schema(which: Which = typer.Argument(..., help="job or reply")) -> None:
        """Print the JSON Schema of a job or of a reply message."""
        adapter: TypeAdapter[object] = TypeAdapter(Job if which is Which.job else Reply)
        typer.echo(json.dumps(adapter.json_schema(), indent=2, sort_keys=True))
