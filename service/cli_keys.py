"""The ``asktell keys`` commands (``service.cli`` adds them to its parser). They work on the
database (``ASKTELL_DATABASE_URL``) directly, not through a server: that is how the first admin
key is made.

asktell keys create --tenant NAME --scope read|write|admin [--name N]
asktell keys list [--tenant NAME]
asktell keys revoke ID
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.db.session import Database

#: ``service.api_keys.SCOPES``, here so that building the parser imports no server code.
SCOPES = ("read", "write", "admin")


def add_parser(sub: Any) -> None:
    """The ``keys`` command under the subparsers ``sub``."""
    keys = sub.add_parser("keys", help="create, list and revoke API keys (on the database)")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="a new key, printed once")
    create.add_argument("--tenant", required=True, help="created when it does not exist")
    create.add_argument("--scope", choices=SCOPES, required=True)
    create.add_argument("--name", help="what the key is for (default: its scope)")
    create.set_defaults(run=_create)
    listed = actions.add_parser("list", help="keys without their secrets")
    listed.add_argument("--tenant", help="only this tenant's keys")
    listed.set_defaults(run=_list)
    revoke = actions.add_parser("revoke")
    revoke.add_argument("key_id", type=int)
    revoke.set_defaults(run=_revoke)


def run(args: argparse.Namespace) -> int:
    from service.app import open_database
    from service.errors import ApiError
    from service.settings import get_settings

    try:
        db = open_database(get_settings())
    except RuntimeError as exc:
        print(f"asktell: {exc}", file=sys.stderr)
        return 2
    try:
        return int(args.run(db, args))
    except ApiError as exc:
        print(f"error {exc.status} {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    finally:
        db.dispose()


def _create(db: Database, args: argparse.Namespace) -> int:
    from service.api_keys import create_key

    created = create_key(db, args.tenant, args.name or args.scope, args.scope)
    print(
        f"key {created.id} of tenant {created.tenant!r}, scope {created.scope} "
        "(shown this once; the server keeps only its hash):",
        file=sys.stderr,
    )
    print(created.key)
    return 0


def _list(db: Database, args: argparse.Namespace) -> int:
    from service.api_keys import list_keys, tenant_id

    tenant = None
    if args.tenant is not None:
        tenant = db.read(lambda conn: tenant_id(conn, args.tenant, create=False))
        if tenant is None:
            print(f"error: no tenant {args.tenant!r}", file=sys.stderr)
            return 1
    print(f"{'ID':>5}  {'TENANT':<16} {'NAME':<20} {'PREFIX':<12} {'SCOPE':<6} STATE")
    for key in list_keys(db, tenant):
        state = "revoked" if key.revoked_at else "active"
        print(
            f"{key.id:>5}  {key.tenant:<16} {key.name:<20} {key.prefix:<12} {key.scope:<6} {state}"
        )
    return 0


def _revoke(db: Database, args: argparse.Namespace) -> int:
    from service.api_keys import revoke_key

    key = revoke_key(db, args.key_id)
    print(f"key {key.id} ({key.prefix}, tenant {key.tenant!r}) revoked")
    return 0
