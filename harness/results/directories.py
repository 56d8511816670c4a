"""Whether a directory option (`run --out`, `check --work-dir`) can hold what will be written there (a file option:
harness.files.file_problem).

Asked before anything runs: a path that is a file, or lies under one, or under a directory this user
cannot write, is one line naming the option, not a traceback minutes later.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.files import creation_problem


def directory_problem(option: str, path: Path | str) -> str | None:
    """None when `path` is a directory, or can be made one, that this process can write; else what is wrong."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            return f"{option} {path}: exists and is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else f"{option} {path}: directory not writable"
    return creation_problem(option, path)
