"""``asktell jobs``: submit, list, show and cancel tuning jobs on a running server.

    asktell jobs submit job.json [--watch]
    asktell jobs list | show ID | cancel ID

``job.json`` is a ``POST /v1/jobs`` body. ``--watch`` draws the job's progress on stderr
until it ends, then prints the job as JSON; the exit code is 0 when it succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client import Client


def add_job_commands(sub: Any, remote: argparse.ArgumentParser) -> None:
    jobs = sub.add_parser("jobs", parents=[remote], help="submit, list, show and cancel jobs")
    jobs_sub = jobs.add_subparsers(dest="action", required=True)
    submit = jobs_sub.add_parser("submit", parents=[remote], help="submit a job (a JSON file)")
    submit.add_argument("file", type=Path, help="the job: a POST /v1/jobs body")
    submit.add_argument("--watch", action="store_true", help="follow it until it ends")
    submit.set_defaults(run=_submit)
    jobs_sub.add_parser("list", parents=[remote]).set_defaults(run=_list)
    show = jobs_sub.add_parser("show", parents=[remote])
    show.add_argument("job_id", type=int)
    show.set_defaults(run=_show)
    cancel = jobs_sub.add_parser("cancel", parents=[remote])
    cancel.add_argument("job_id", type=int)
    cancel.set_defaults(run=_cancel)


def _submit(client: Client, args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    try:
        fields = json.loads(args.file.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 1
    if not isinstance(fields, dict):
        print(f"error: {args.file} is not a JSON object", file=sys.stderr)
        return 1
    try:
        job = client.submit_job(**fields)
    except ValidationError as exc:
        print(f"error: {args.file}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    if not args.watch:
        print(job.info.model_dump_json(indent=2))
        return 0
    try:
        info = job.wait(progress=True)
    except KeyboardInterrupt:
        return 130
    print(info.model_dump_json(indent=2))
    return 0 if info.state == "succeeded" else 1


def _list(client: Client, args: argparse.Namespace) -> int:
    rows = [["ID", "NAME", "STATE", "STEPS", "BEST", "STUDY"]]
    for j in client.jobs():
        best = "-" if j.best_score is None else f"{j.best_score:.6g}"
        steps = f"{j.steps_done}/{j.steps_budget}"
        rows.append([str(j.id), j.name, j.state, steps, best, str(j.study_id)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _show(client: Client, args: argparse.Namespace) -> int:
    print(client.job(args.job_id).info.model_dump_json(indent=2))
    return 0


def _cancel(client: Client, args: argparse.Namespace) -> int:
    print(client.job(args.job_id).cancel().model_dump_json(indent=2))
    return 0
