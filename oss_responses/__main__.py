"""``python -m oss_responses``: the ``oss-responses`` command."""

import sys

from oss_responses.cli import main

sys.exit(main())
