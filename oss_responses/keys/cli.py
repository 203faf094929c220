"""``python -m oss_responses.keys``: create, list and revoke API keys (for ``OSS_RESPONSES_AUTH=keys``).

``create`` prints the new key's secret alone on stdout (``SECRET=$(python -m oss_responses.keys create
--owner acme)``) and its id on stderr: the secret is shown this once; SQL keeps only its hash.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from oss_responses.cli import positive_int
from oss_responses.config import get_settings
from oss_responses.doctor.stores import database_problem
from oss_responses.storage import ApiKeyRecord, Database, create_api_key, list_api_keys, revoke_api_key

LIST_COLUMNS = ("id", "owner", "models", "max_background", "created_at", "revoked_at")


def _models(value: str) -> list[str]:
    models = [name.strip() for name in value.split(",") if name.strip()]
    if not models:
        raise argparse.ArgumentTypeError("name at least one model (a,b,...)")
    return models


def _parser() -> argparse.ArgumentParser:
    # Reached as `oss-responses keys` (the console script) or `python -m oss_responses.keys`: usage says which.
    prog = "oss-responses keys" if Path(sys.argv[0]).name == "oss-responses" else "python -m oss_responses.keys"
    parser = argparse.ArgumentParser(prog=prog, description="Manage API keys.")
    parser.add_argument("--url", help="SQLAlchemy URL of the database (default: OSS_RESPONSES_DATABASE_URL)")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="create a key; prints its secret once")
    create.add_argument("--owner", required=True, help="the project or owner whose responses the key reaches")
    create.add_argument("--models", type=_models, help="comma-separated models the key may use (default: all)")
    create.add_argument("--max-background", type=positive_int, dest="max_background",
                        help="background responses in flight at once (default: OSS_RESPONSES_MAX_BACKGROUND_PER_KEY)")
    commands.add_parser("list", help="list keys (never their secrets)")
    revoke = commands.add_parser("revoke", help="revoke a key: refused from its next request on")
    revoke.add_argument("key_id")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    url = args.url or get_settings().database_url
    if (problem := database_problem(url)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    database = Database(url)
    try:
        if args.command == "create":
            return _create(database, args.owner, args.models, args.max_background)
        if args.command == "list":
            return _list(database)
        return _revoke(database, args.key_id)
    finally:
        database.dispose()


def _create(database: Database, owner: str, models: list[str] | None, max_background: int | None) -> int:
    if not owner.strip():
        print("error: --owner must not be empty", file=sys.stderr)
        return 2
    record, secret = database.run(create_api_key, owner, models=models, max_background=max_background)
    print(secret)
    print(f"created {record.id} for owner {owner!r}; the secret above is shown only this once", file=sys.stderr)
    return 0


def _list(database: Database) -> int:
    print("\t".join(LIST_COLUMNS))
    for record in database.run(list_api_keys):
        print("\t".join(_row(record)))
    return 0


def _row(record: ApiKeyRecord) -> Sequence[str]:
    return (
        record.id,
        record.owner,
        ",".join(record.models) if record.models is not None else "*",
        str(record.max_background) if record.max_background is not None else "default",
        record.created_at.isoformat(timespec="seconds"),
        record.revoked_at.isoformat(timespec="seconds") if record.revoked_at else "-",
    )


def _revoke(database: Database, key_id: str) -> int:
    if not database.run(revoke_api_key, key_id):
        print(f"error: no active key {key_id!r} (unknown, or already revoked)", file=sys.stderr)
        return 1
    print(f"revoked {key_id}", file=sys.stderr)
    return 0
