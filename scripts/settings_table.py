"""Print README.md's configuration table from the Settings class (the one source of truth).

Run from the checkout: ``.venv/bin/python -m scripts.settings_table``.
"""

from __future__ import annotations

import json

from oss_responses.config import Settings


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
