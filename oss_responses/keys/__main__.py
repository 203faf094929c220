"""``python -m oss_responses.keys create|list|revoke``: see ``cli.py``."""

from __future__ import annotations

import sys

from oss_responses.keys.cli import main

if __name__ == "__main__":
    sys.exit(main())
