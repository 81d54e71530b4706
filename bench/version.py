"""The code version a benchmark reports: the short commit of HEAD, ``+dirty`` when files
under the given paths differ from it (untracked ones included), ``unknown`` outside git."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_version(*paths: str) -> str:
    """``paths`` relative to the repository root; none means the whole tree."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--", *paths)
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
