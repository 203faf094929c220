"""``oss-responses``: the service's one command (``api``, ``worker``, ``migrate``, ``keys``, ``doctor``,
``mcp-demo``).

Every command reads the ``OSS_RESPONSES_*`` settings, like the ``python -m`` entry points it wraps
(``python -m oss_responses.api``, ``python -m oss_responses.workers``, ``python -m
oss_responses.storage migrate``), which keep working. Imports happen per command, so ``doctor`` and
``migrate`` start without loading the API or Celery.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from sqlalchemy import make_url


def positive_int(value: str) -> int:
    """An argparse type: a whole number of 1 or more."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


# Commands whose arguments belong to another parser (Celery's, the keys tool's), passed on untouched.
PassThrough = Callable[[list[str]], int]


def run_worker(argv: list[str]) -> int:
    from oss_responses.workers.command import main as worker_main

    worker_main(argv)
    return 0


def run_keys(argv: list[str]) -> int:
    try:
        keys_cli = importlib.import_module("oss_responses.keys.cli")
    except ModuleNotFoundError as exc:
        if exc.name not in ("oss_responses.keys", "oss_responses.keys.cli"):
            raise
        print("oss-responses keys: API keys are not available in this build", file=sys.stderr)
        return 2
    code: int = keys_cli.main(argv)
    return code


DEMO_SERVERS = ("calculator", "documents")


def run_mcp_demo(argv: list[str]) -> int:
    if not argv or argv[0] not in DEMO_SERVERS:
        print(f"usage: oss-responses mcp-demo {{{','.join(DEMO_SERVERS)}}} [--host H] [--port P] [--transport T]",
              file=sys.stderr)
        return 2
    server = importlib.import_module(f"oss_responses.tools.servers.{argv[0]}")
    server.main(argv[1:])
    return 0


PASS_THROUGH: dict[str, PassThrough] = {"worker": run_worker, "keys": run_keys, "mcp-demo": run_mcp_demo}


def run_api(args: argparse.Namespace) -> int:
    from oss_responses.api.__main__ import main as api_main

    api_main()
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    from oss_responses.config import get_settings
    from oss_responses.storage.migrations import current_revision, migrate, newest_revision, schema_newer

    url = args.url or get_settings().database_url
    shown = make_url(url).render_as_string(hide_password=True)
    try:
        if schema_newer(current := current_revision(url)):
            # A rollback: Alembic would refuse the revision it cannot locate, and a deployment that runs
            # migrate before its API and workers (docker-compose) would not start the previous release.
            print(f"{shown} at revision {current}, newer than this release's {newest_revision()} (a newer "
                  "release migrated it): left as it is; this release runs on it")
            return 0
        migrate(url, args.revision)
        current = current_revision(url)
    except (OperationalError, InterfaceError) as exc:
        print(f"oss-responses migrate: {shown} did not answer: {exc.orig}", file=sys.stderr)
        return 1
    except DBAPIError as exc:
        print(f"oss-responses migrate: a migration of {shown} failed: {exc.orig}", file=sys.stderr)
        return 1
    except CommandError as exc:  # a revision this build does not know
        print(f"oss-responses migrate: {exc}", file=sys.stderr)
        return 2
    # migrate only upgrades: a database already past the revision asked for stays where it is.
    past = args.revision != "head" and current != args.revision
    print(f"{shown} at revision {current}" + (f" (past {args.revision}: not downgraded)" if past else ""))
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    from oss_responses.config import get_settings
    from oss_responses.doctor import run_checks
    from oss_responses.doctor.checks import CHECKS

    return 0 if run_checks(get_settings(), CHECKS, sys.stdout) else 1


def database_url_argument(value: str) -> str:
    from oss_responses.config import valid_database_url

    try:
        return valid_database_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oss-responses", description="The oss-responses service: its API, workers, "
                                     "database migrations, API keys, and a check of what it needs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    api = commands.add_parser("api", help="serve the API (uvicorn on OSS_RESPONSES_API_HOST:API_PORT)")
    api.set_defaults(run=run_api)
    commands.add_parser("worker", help="a Celery worker for OSS_RESPONSES_WORKER_MODEL's queue; "
                                       "further arguments go to `celery worker` (e.g. -n gpu0@%%h)")
    upgrade = commands.add_parser("migrate", help="upgrade the database to the newest schema")
    upgrade.add_argument("--url", type=database_url_argument,
                         help="SQLAlchemy URL (default: OSS_RESPONSES_DATABASE_URL)")
    upgrade.add_argument("--revision", default="head")
    upgrade.set_defaults(run=run_migrate)
    commands.add_parser("keys", help="manage API keys (`oss-responses keys --help`)")
    commands.add_parser("mcp-demo", help="serve a demo MCP server: calculator (code_interpreter) or documents "
                                         "(web_search_preview); --host, --port, --transport")
    commands.add_parser("doctor", help="check Redis, the database, the vocabulary, the engine, the MCP servers "
                                       "and the encryption keys; exits 1 on any FAIL").set_defaults(run=run_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in PASS_THROUGH:
        return PASS_THROUGH[args[0]](args[1:])
    namespace = build_parser().parse_args(args)
    run: Callable[[argparse.Namespace], int] = namespace.run
    return run(namespace)


if __name__ == "__main__":
    sys.exit(main())
