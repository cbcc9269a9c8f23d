"""Where the files shipped with the bot live: `config/` and `workspace_template/`.

In a checkout (and an editable install) they sit beside the package; a wheel carries them inside
it under `bot/_shipped/` (see pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def shipped_path(name: str) -> Path:
    """The shipped folder `name` (`config` or `workspace_template`)."""
    for candidate in (_PACKAGE_DIR.parent / name, _PACKAGE_DIR / "_shipped" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"shipped folder {name!r} is missing from the installation")
