"""The ``asktell`` command: run the server, migrate the database, inspect studies.

    asktell serve [--host H] [--port P] [--workers N] [--access-log]
    asktell db upgrade
    asktell studies list | show ID | export ID [--format json|csv] | import FILE [--name N]
    asktell trials list STUDY_ID [--state S]

Commands that read studies talk to a running server (``--url``, default
``$ASKTELL_URL`` or http://127.0.0.1:8000) through the client.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asktell", description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("ASKTELL_URL", "http://127.0.0.1:8000"))
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

    studies = sub.add_parser("studies", help="list, show, export and import studies")
    studies_sub = studies.add_subparsers(dest="action", required=True)
    studies_sub.add_parser("list")
    show = studies_sub.add_parser("show")
    show.add_argument("study_id", type=int)
    export = studies_sub.add_parser("export")
    export.add_argument("study_id", type=int)
    export.add_argument("--format", choices=["json", "csv"], default="json")
    imp = studies_sub.add_parser("import")
    imp.add_argument("file", type=Path)
    imp.add_argument("--name")

    trials = sub.add_parser("trials", help="list a study's trials")
    trials_sub = trials.add_subparsers(dest="action", required=True)
    tlist = trials_sub.add_parser("list")
    tlist.add_argument("study_id", type=int)
    tlist.add_argument("--state", action="append")

    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args.host, args.port, args.workers, args.access_log)
    if args.command == "db":
        return _db(args.action)
    return _remote(args)


def _serve(host: str, port: int, workers: int, access_log: bool) -> int:
    import uvicorn

    from service.app import open_database
    from service.settings import get_settings

    # Upgrade (SQLite) or check (PostgreSQL) once here, so a schema problem is one clear message.
    try:
        open_database(get_settings()).dispose()
    except RuntimeError as exc:
        print(f"asktell: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        "service.main:app",
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=access_log,
    )
    return 0


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
    from client import Client

    with Client(args.url) as client:
        if args.command == "studies" and args.action == "list":
            for s in client.list_studies():
                print(f"{s.id}\t{s.name}\t{s.state}\t{s.engine.name}\t{s.trial_counts}")
        elif args.command == "studies" and args.action == "show":
            print(client.get_study(args.study_id).info.model_dump_json(indent=2))
        elif args.command == "studies" and args.action == "export":
            study = client.get_study(args.study_id)
            if args.format == "csv":
                sys.stdout.write(study.export_csv())
            else:
                print(study.export().model_dump_json(indent=2))
        elif args.command == "studies" and args.action == "import":
            study = client.import_study(json.loads(args.file.read_text()), name=args.name)
            print(study.id)
        else:
            study = client.get_study(args.study_id)
            for t in study.trials(states=args.state):
                print(f"{t.number}\t{t.state}\t{json.dumps(t.params)}\t{json.dumps(t.values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
