"""``python -m oss_responses.storage migrate [--url URL]``: upgrade the database to the newest schema."""

from __future__ import annotations

import argparse
import sys

from oss_responses.cli import database_url_argument


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oss_responses.storage")
    commands = parser.add_subparsers(dest="command", required=True)
    upgrade = commands.add_parser("migrate", help="alembic upgrade to the newest revision")
    # Checked as `oss-responses migrate` checks it: a usage error, not SQLAlchemy's traceback.
    upgrade.add_argument("--url", type=database_url_argument,
                         help="SQLAlchemy URL (default: OSS_RESPONSES_DATABASE_URL)")
    upgrade.add_argument("--revision", default="head")
    args = parser.parse_args(argv)
    from oss_responses.cli import run_migrate  # the same command as `oss-responses migrate`

    sys.exit(run_migrate(args))


if __name__ == "__main__":
    main()
