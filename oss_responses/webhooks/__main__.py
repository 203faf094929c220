"""``python -m oss_responses.webhooks list [--response ID] [--failed] [--limit N] [--json]``: the delivery log.

Reads ``webhook_deliveries`` from ``OSS_RESPONSES_DATABASE_URL``, newest first: one line per event and
endpoint (state, attempts, the last HTTP status and error, when it was delivered).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from oss_responses.cli import positive_int
from oss_responses.config import get_settings
from oss_responses.doctor.stores import database_problem
from oss_responses.logs import safe_url
from oss_responses.storage import Database
from oss_responses.storage.webhook_deliveries import DeliveryRecord, list_deliveries


def _line(record: DeliveryRecord) -> str:
    delivered = record.delivered_at.isoformat(timespec="seconds") if record.delivered_at else "-"
    status = record.last_status if record.last_status is not None else "-"
    line = (f"{record.webhook_id} {record.event_type} {record.response_id} {record.state} "
            f"attempts={record.attempts} status={status} delivered_at={delivered} {safe_url(record.endpoint_url)}")
    return line + (f" error={record.last_error}" if record.last_error else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oss_responses.webhooks", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="webhook deliveries, newest first")
    listing.add_argument("--response", help="only the deliveries of this response id")
    listing.add_argument("--failed", action="store_true", help="only deliveries whose last attempt failed")
    listing.add_argument("--limit", type=positive_int, default=100, help="at most this many (default: 100)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    url = get_settings().database_url
    if (problem := database_problem(url)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    db = Database(url)
    try:
        records = db.run(list_deliveries, response_id=args.response, failed=args.failed, limit=args.limit)
    finally:
        db.dispose()
    for record in records:
        shown = asdict(record) | {"endpoint_url": safe_url(record.endpoint_url)}  # no receiver's credentials
        print(json.dumps(shown, default=str) if args.json else _line(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
