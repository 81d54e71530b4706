"""The ``asktell`` command: run the server, migrate the database, inspect and watch studies.

    asktell serve [--host H] [--port P] [--workers N] [--access-log]
    asktell db upgrade
    asktell studies list | show ID | export ID [--format json|csv] | import FILE [--name N]
    asktell studies watch ID [--interval S] [--once]
    asktell trials list STUDY_ID [--state S]
    asktell jobs submit job.json [--watch] | list | show ID | cancel ID
    asktell datasets upload FILE --name N --target COLUMN [--task T] | list | show ID | delete ID
    asktell keys create --tenant NAME --scope read|write|admin [--name N] | list | revoke ID

Commands that read studies talk to a running server (``--url``, before or after the
subcommand, default ``$ASKTELL_URL`` or http://127.0.0.1:8000) through the client, with the API
key ``$ASKTELL_API_KEY`` when the server needs one. Their errors are one line on stderr
(``error 404 not_found: ...``) and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from time import monotonic, sleep
from typing import TYPE_CHECKING, TextIO

from service import cli_datasets, cli_keys

if TYPE_CHECKING:
    from client import Client, Study
    from client.models import StudyPublic

DEFAULT_URL = "http://127.0.0.1:8000"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args.host, args.port, args.workers, args.access_log)
    if args.command == "db":
        return _db(args.action)
    if args.command == "keys":
        return cli_keys.run(args)
    return _remote(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asktell", description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("ASKTELL_URL", DEFAULT_URL))
    # The same option after the subcommand; SUPPRESS keeps the value given before it otherwise.
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument(
        "--url", default=argparse.SUPPRESS, help="the server (default $ASKTELL_URL)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument(
        "--access-log", action="store_true", help="log every request (off: it costs throughput)"
    )

    db = sub.add_parser("db", help="database schema")
    db.add_argument("action", choices=["upgrade", "current"])

    studies = sub.add_parser(
        "studies", parents=[remote], help="list, show, watch, export and import studies"
    )
    studies_sub = studies.add_subparsers(dest="action", required=True)
    studies_sub.add_parser("list", parents=[remote]).set_defaults(run=_list_studies)
    show = studies_sub.add_parser("show", parents=[remote])
    show.add_argument("study_id", type=int)
    show.set_defaults(run=_show_study)
    watch = studies_sub.add_parser("watch", parents=[remote], help="a live table of progress")
    watch.add_argument("study_id", type=int)
    watch.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    watch.add_argument("--once", action="store_true", help="print one frame and exit")
    watch.set_defaults(run=_watch_study)
    export = studies_sub.add_parser("export", parents=[remote])
    export.add_argument("study_id", type=int)
    export.add_argument("--format", choices=["json", "csv"], default="json")
    export.set_defaults(run=_export_study)
    imp = studies_sub.add_parser("import", parents=[remote])
    imp.add_argument("file", type=Path)
    imp.add_argument("--name")
    imp.set_defaults(run=_import_study)

    trials = sub.add_parser("trials", parents=[remote], help="list a study's trials")
    trials_sub = trials.add_subparsers(dest="action", required=True)
    tlist = trials_sub.add_parser("list", parents=[remote])
    tlist.add_argument("study_id", type=int)
    tlist.add_argument("--state", action="append")
    tlist.set_defaults(run=_list_trials)
    from service.cli_jobs import add_job_commands

    add_job_commands(sub, remote)
    cli_datasets.add_parser(sub, remote)
    cli_keys.add_parser(sub)
    return parser


def _serve(host: str, port: int, workers: int, access_log: bool) -> int:
    import uvicorn

    from service.api_keys import auth_line
    from service.app import open_database
    from service.settings import get_settings
    from service.transport import PROTOCOL

    # Upgrade (SQLite) or check (PostgreSQL) once here, so a schema problem is one clear message.
    try:
        open_database(get_settings()).dispose()
    except RuntimeError as exc:
        print(f"asktell: {exc}", file=sys.stderr)
        return 2
    # The job workers this server starts reach it here (unless configured otherwise).
    os.environ.setdefault("ASKTELL_SELF_URL", f"http://{_connect_host(host)}:{port}")
    # Auth follows the address served (ASKTELL_AUTH=auto): off on loopback only.
    os.environ["ASKTELL_HOST"] = host
    get_settings.cache_clear()
    settings = get_settings()
    print(f"asktell: {auth_line(settings)}", file=sys.stderr)
    uvicorn.run(
        "service.main:app",
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=access_log,
        # httptools with header size and time limits (service.transport).
        http=PROTOCOL,
        timeout_keep_alive=settings.keep_alive_timeout,
    )
    return 0


def _connect_host(host: str) -> str:
    """Where a local process reaches a server listening on ``host``."""
    if host in ("0.0.0.0", "", "*"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _db(action: str) -> int:
    from service.db.migrate import current_revision, upgrade
    from service.db.session import Database
    from service.settings import get_settings

    db = Database(get_settings().database_url)
    try:
        if action == "upgrade":
            upgrade(db.engine)
        print(current_revision(db.engine))
    finally:
        db.dispose()
    return 0


def _remote(args: argparse.Namespace) -> int:
    """Run ``args.run`` against the server at ``args.url``; an error is one line on stderr and
    exit code 1."""
    from client import ApiError, Client, TransportError

    try:
        with Client(args.url) as client:
            return int(args.run(client, args))
    except ApiError as exc:
        return _error(f"error {exc.status} {exc.code}: {exc.detail}")
    except TransportError as exc:
        cause = exc.__cause__ or exc  # the httpx error: "[Errno 111] Connection refused"
        return _error(f"error: cannot reach {args.url}: {str(cause) or type(cause).__name__}")


def _error(message: str) -> int:
    print(" ".join(message.split()), file=sys.stderr)
    return 1


def _list_studies(client: Client, args: argparse.Namespace) -> int:
    rows = [["ID", "NAME", "STATE", "ENGINE", "BEST", "TRIALS"]]
    for s in client.list_studies():
        rows.append([str(s.id), s.name, s.state, s.engine.name, _best(s), _counts(s.trial_counts)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _best(info: StudyPublic) -> str:
    """A single-objective study's best value, or ``-`` (none yet, or several objectives)."""
    if not info.best_values or len(info.objectives) != 1:
        return "-"
    return f"{info.best_values[info.objectives[0].name]:.6g}"


def _counts(counts: dict[str, int]) -> str:
    """``43: 40 completed, 2 running, 1 failed`` (largest first), or ``0``."""
    by_size = sorted(counts.items(), key=lambda kv: -kv[1])
    listed = ", ".join(f"{n} {state}" for state, n in by_size if n)
    total = sum(counts.values())
    return f"{total}: {listed}" if listed else str(total)


def _show_study(client: Client, args: argparse.Namespace) -> int:
    print(client.get_study(args.study_id).info.model_dump_json(indent=2))
    return 0


def _export_study(client: Client, args: argparse.Namespace) -> int:
    study = client.get_study(args.study_id)
    if args.format == "csv":
        sys.stdout.write(study.export_csv())
    else:
        print(study.export().model_dump_json(indent=2))
    return 0


def _import_study(client: Client, args: argparse.Namespace) -> int:
    try:
        data = json.loads(args.file.read_text())
    except (OSError, ValueError) as exc:
        return _error(f"error: cannot read {args.file}: {exc}")
    print(client.import_study(data, name=args.name).id)
    return 0


def _list_trials(client: Client, args: argparse.Namespace) -> int:
    study = client.get_study(args.study_id)
    for t in study.trials(states=args.state):
        print(f"{t.number}\t{t.state}\t{json.dumps(t.params)}\t{json.dumps(t.values)}")
    return 0


# --- studies watch ------------------------------------------------------------------------


def _watch_study(client: Client, args: argparse.Namespace) -> int:
    """Redraw the study's progress every ``--interval`` seconds until it is completed, Ctrl-C,
    or after one frame with ``--once``."""
    screen, rate = Screen(sys.stdout), Rate()
    try:
        study = client.get_study(args.study_id)
        while True:
            screen.draw(progress_rows(study, rate.per_minute(study.info)))
            if args.once or study.info.state == "completed":
                return 0
            sleep(args.interval)
            study.refresh()
    except KeyboardInterrupt:
        return 0


def progress_rows(study: Study, per_minute: float | None) -> list[tuple[str, str]]:
    """(label, value) rows of a study's progress; several objectives ask for the best set."""
    info = study.info
    if len(info.objectives) == 1:
        best = _best(info)
    else:
        front = study.best()
        best = f"{len(front.trials)} Pareto-optimal"
        if front.hypervolume is not None:
            best += f", hypervolume {front.hypervolume:.6g}"
    idle = (datetime.now(UTC) - info.updated_at).total_seconds()
    return [
        ("study", f"{info.id} {info.name}"),
        ("state", info.state),
        ("engine", info.engine.name),
        ("trials", _counts(info.trial_counts)),
        ("best", best),
        ("rate", "-" if per_minute is None else f"{per_minute:.1f} trials/min"),
        ("last activity", f"{_ago(idle)} ago"),
    ]


def _ago(seconds: float) -> str:
    minutes, secs = divmod(max(int(seconds), 0), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


class Rate:
    """Finished trials per minute: over the last minute of polls, or over the study's life
    (created to last activity) until two polls are apart."""

    WINDOW_S = 60.0

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque()

    def per_minute(self, info: StudyPublic) -> float | None:
        from client.models import FINISHED_STATES

        now = monotonic()
        finished = sum(info.trial_counts.get(state, 0) for state in FINISHED_STATES)
        self.samples.append((now, finished))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.WINDOW_S:
            self.samples.popleft()
        first, first_count = self.samples[0]
        if now > first:
            return (finished - first_count) / (now - first) * 60
        life = (info.updated_at - info.created_at).total_seconds()
        return finished / life * 60 if life > 0 else None


class Screen:
    """Where ``watch`` draws: a table redrawn in place on a terminal (ANSI cursor moves),
    otherwise one timestamped line per frame, so a log or a pipe gets no escape codes."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.tty, self.height = out, out.isatty(), 0

    def draw(self, rows: list[tuple[str, str]]) -> None:
        if self.tty:
            width = max(len(label) for label, _ in rows)
            up = f"\x1b[{self.height}F" if self.height else ""  # to the first line of the frame
            lines = [f"{label.ljust(width)}  {value}\x1b[K" for label, value in rows]
            self.out.write(up + "\n".join(lines) + "\n\x1b[J")
            self.height = len(lines)
        else:
            stamp = datetime.now(UTC).strftime("%H:%M:%S")
            self.out.write(stamp + "  " + "  ".join(f"{k} {v}" for k, v in rows) + "\n")
        self.out.flush()


if __name__ == "__main__":
    raise SystemExit(main())
