"""Forward this machine's pip settings to uv, which ignores pip's configuration.

Without this, uv resolves `torch==2.13.0` to the CUDA build from the index (gigabytes) even
where pip is set up with a local find-links directory holding the CPU wheel. The noxfile and
the cell environments both take their uv settings from `uv_environment()`.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys


@functools.lru_cache(maxsize=1)
def pip_config() -> dict[str, str]:
    """pip's effective configuration (`pip config list`), keys without their scope prefix.

    Scopes are listed in pip's own precedence order, so a later scope overrides an earlier one.
    """
    out = ""
    # This interpreter's pip, else the machine's: an environment made by uv has no pip, and the machine's pip
    # configuration (its find-links, its constraints) must read the same from every interpreter the harness runs in.
    for pip in ([sys.executable, "-m", "pip"], [shutil.which("pip3") or "pip3"], [shutil.which("pip") or "pip"]):
        try:
            done = subprocess.run([*pip, "config", "list"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            out = done.stdout
            break
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        scope, _, name = key.rpartition(".")
        if scope.split(".")[0] in ("global", "install", ":env:", ""):
            values[name] = value.strip().strip("'\"")
    return values


def _setting(environ: dict[str, str], pip_env: str, pip_key: str) -> list[str]:
    raw = environ.get(pip_env) or pip_config().get(pip_key, "")
    return raw.split()


def uv_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The uv variables to add to `environ` so that uv sees what pip sees; existing UV_* win."""
    environ = dict(os.environ if environ is None else environ)
    extra: dict[str, str] = {}
    if "UV_FIND_LINKS" not in environ:
        links = _setting(environ, "PIP_FIND_LINKS", "find-links")
        if links:
            extra["UV_FIND_LINKS"] = ",".join(links)
    if "UV_CONSTRAINT" not in environ:
        constraints = _setting(environ, "PIP_CONSTRAINT", "constraint")
        if constraints:
            extra["UV_CONSTRAINT"] = " ".join(constraints)
    if "UV_DEFAULT_INDEX" not in environ and "UV_INDEX_URL" not in environ:
        index = _setting(environ, "PIP_INDEX_URL", "index-url")
        if index:
            extra["UV_DEFAULT_INDEX"] = index[0]
    return extra


def index_url(environ: dict[str, str] | None = None) -> str:
    """The simple-API index the cells install from (uv's, else pip's, else PyPI)."""
    environ = dict(os.environ if environ is None else environ)
    for name in ("HARNESS_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if environ.get(name):
            return environ[name].rstrip("/")
    return (pip_config().get("index-url") or "https://pypi.org/simple").rstrip("/")


def find_links(environ: dict[str, str] | None = None) -> list[str]:
    environ = dict(os.environ if environ is None else environ)
    if environ.get("UV_FIND_LINKS"):
        return [p for p in environ["UV_FIND_LINKS"].split(",") if p]
    return _setting(environ, "PIP_FIND_LINKS", "find-links")
