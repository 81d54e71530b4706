"""The ``asktell datasets`` commands (``service.cli`` adds them to its parser):

asktell datasets upload FILE --name N --target COLUMN [--task classification|regression]
asktell datasets list
asktell datasets show ID_OR_NAME
asktell datasets delete ID_OR_NAME
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client import Client


def add_parser(sub: Any, remote: argparse.ArgumentParser) -> None:
    """The ``datasets`` command under the subparsers ``sub``; ``remote`` gives ``--url``."""
    datasets = sub.add_parser(
        "datasets", parents=[remote], help="upload, list, show and delete datasets"
    )
    actions = datasets.add_subparsers(dest="action", required=True)
    upload = actions.add_parser("upload", parents=[remote], help="upload a CSV")
    upload.add_argument("file", type=Path)
    upload.add_argument("--name", required=True)
    upload.add_argument("--target", required=True, help="the column to predict")
    upload.add_argument(
        "--task", choices=["classification", "regression"], default="classification"
    )
    upload.set_defaults(run=_upload)
    actions.add_parser("list", parents=[remote]).set_defaults(run=_list)
    for name, run in (("show", _show), ("delete", _delete)):
        action = actions.add_parser(name, parents=[remote])
        action.add_argument("dataset", help="an id, or a dataset's name")
        action.set_defaults(run=run)


def _upload(client: Client, args: argparse.Namespace) -> int:
    try:
        content = args.file.read_bytes()
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 1
    info = client.upload_dataset(args.name, content, target=args.target, task=args.task)
    print(info.id)
    return 0


def _list(client: Client, args: argparse.Namespace) -> int:
    rows = [["ID", "NAME", "TASK", "TARGET", "ROWS", "COLUMNS", "CLASSES"]]
    for d in client.datasets():
        classes = "-" if d.classes is None else str(len(d.classes))
        ident = "builtin" if d.id is None else str(d.id)
        rows.append([ident, d.name, d.task, d.target, str(d.n_rows), str(len(d.columns)), classes])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _show(client: Client, args: argparse.Namespace) -> int:
    print(client.dataset(args.dataset).model_dump_json(indent=2))
    return 0


def _delete(client: Client, args: argparse.Namespace) -> int:
    client.delete_dataset(args.dataset)
    return 0
