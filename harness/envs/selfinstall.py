"""Whether a nox session's environment already holds this project's editable install, as pyproject.toml now asks.

nox installs the harness into every session before it runs (`session.install("-e", ROOT)`), and with a reused
environment that meant building and installing the editable wheel again each time: 2.4 s of a second `nox` that
otherwise takes about 1.5 s. An editable install reads the code from the clone, so only what pyproject.toml
declares (dependencies, packages, entry points) can make it stale. The session records what it installed from in
its environment (`record`) and installs again only when that differs or the install is gone (`is_current`), as tox
does with a reused environment. A new environment (`nox --reinstall`, or one removed) has no record.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

RECORD_NAME = ".qwen35-harness-install"  # in the session's environment folder
DISTRIBUTION = "qwen35_compat_harness"  # the name uv writes its editable finder and .pth under


def inputs(root: Path) -> str:
    """What the editable install was made from: the clone's folder and its pyproject.toml's bytes."""
    project = Path(root).resolve()
    digest = hashlib.sha256((project / "pyproject.toml").read_bytes()).hexdigest()
    return f"{project}\n{digest}\n"


def _path_files(venv: Path) -> list[Path]:
    """The editable install's path file in the environment's site-packages (none once it is uninstalled)."""
    return list(Path(venv).glob(f"lib*/python*/site-packages/__editable__.{DISTRIBUTION}-*.pth"))


def _installed(venv: Path) -> bool:
    return bool(_path_files(venv))


def is_current(venv: Path, root: Path) -> bool:
    """The environment holds the editable install made from this clone's pyproject.toml as it is now."""
    try:
        recorded = (Path(venv) / RECORD_NAME).read_text(encoding="utf-8")
    except OSError:
        return False
    return recorded == inputs(root) and _installed(venv)


def started() -> float:
    """The time to hand `record` once the install is done."""
    return time.time() - 1.0  # the file system's clock may lag this one by a tick


def record(venv: Path, root: Path, since: float) -> bool:
    """Note what the install that began at `since` was made from, if it wrote the install: where nox skipped it
    (`nox -R`: a reused environment, no install) nothing is noted, so the next plain run installs."""
    if not any(path.stat().st_mtime >= since for path in _path_files(venv)):
        return False
    (Path(venv) / RECORD_NAME).write_text(inputs(root), encoding="utf-8")
    return True
