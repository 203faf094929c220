"""Print README.md's configuration table from the Settings class (the one source of truth)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oss_responses.config import Settings  # noqa: E402


def rows() -> list[str]:
    out = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory is not None else field.default
        if isinstance(default, (list, dict)):
            default = json.dumps(default)
        shown = "(unset)" if default is None else f"`{default}`"
        meaning = (field.description or "").replace("|", "\\|")
        out.append(f"| `OSS_RESPONSES_{name.upper()}` | {shown} | {meaning} |")
    return out


if __name__ == "__main__":
    print("\n".join(rows()))
