"""Forward this machine's pip settings to uv, which ignores pip's configuration.

Without this, uv resolves `torch==2.13.0` to the CUDA build from the index (gigabytes) even
where pip is set up with a local find-links directory holding the CPU wheel. The noxfile and
the cell environments both take their uv settings from `uv_environment()`, which also gives uv
PyPI's cache policy where nobody configures uv (indexcache.py).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from harness.envs import indexcache
from harness.files import write_json_atomic

# pip's answer kept between runs: starting pip to ask it costs about 0.45 s on a shared core, twice in a warm rerun
# (run, then report) that otherwise takes about 2 s. Kept with the files pip said it reads (`pip config debug`) and
# what else can change its answer; any change in those asks pip again.
CACHE_NAME = "pip-config"
_DEBUG_FILE = re.compile(r"^\s+(\S.*), exists: (?:True|False)$")
_ASKED_WITH = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV", "PYENV_VERSION", "PATH")


def _pips() -> list[list[str]]:
    # This interpreter's pip, else the machine's: an environment made by uv has no pip, and the machine's pip
    # configuration (its find-links, its constraints) must read the same from every interpreter the harness runs in.
    return [[sys.executable, "-m", "pip"], [shutil.which("pip3") or "pip3"], [shutil.which("pip") or "pip"]]


def cache_folder() -> Path:
    """The folder the harness keeps its machine-wide caches in (pip's answer, uv's index policy, the container's
    root file system)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qwen35-harness"


def _cache_file() -> Path:
    """One per interpreter: the harness's and a cell's (verl-tests asks from there) would otherwise replace each
    other's."""
    return cache_folder() / f"{CACHE_NAME}-{hashlib.sha256(sys.executable.encode()).hexdigest()[:12]}.json"


def _key(files: list[str]) -> str:
    """What pip's answer depends on: which pips would be asked, the variables it reads, the files it reads."""
    def state(path: str) -> list | None:
        try:
            found = os.stat(path)
        except OSError:
            return None
        return [found.st_mtime_ns, found.st_size, found.st_ino]

    try:
        here = os.getcwd()  # a pyenv shim picks its Python by the folder it runs in
    except OSError:  # the folder was removed under this process
        here = None
    parts = {"pips": [[*pip, state(pip[0])] for pip in _pips()], "cwd": here,
             # pip installed into this interpreter, upgraded or removed; not the whole site folder, whose time
             # changes with any install (nox's editable install of the harness before every run)
             "site_pip": state(os.path.join(sysconfig.get_paths()["purelib"], "pip")),
             "environ": {k: v for k, v in sorted(os.environ.items()) if k.startswith("PIP_") or k in _ASKED_WITH},
             "files": {path: state(path) for path in files}}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _cached() -> dict[str, str] | None:
    try:
        kept = json.loads(_cache_file().read_text(encoding="utf-8"))
        if kept["key"] == _key(list(kept["files"])):
            return dict(kept["values"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _ask_pip() -> tuple[str, list[str]]:
    """(`pip config list`'s output, the files `pip config debug` says it reads) from the first pip that answers."""
    for pip in _pips():
        try:
            done = subprocess.run([*pip, "config", "list"], capture_output=True, text=True, timeout=60, check=False)
            if done.returncode != 0:
                continue
            debug = subprocess.run([*pip, "config", "debug"], capture_output=True, text=True, timeout=60,
                                   check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        files = [m.group(1) for m in map(_DEBUG_FILE.match, debug.stdout.splitlines()) if m]
        return done.stdout, files if debug.returncode == 0 and files else []
    return "", []


@functools.lru_cache(maxsize=1)
def pip_config() -> dict[str, str]:
    """pip's effective configuration (`pip config list`), keys without their scope prefix.

    Scopes are listed in pip's own precedence order, so a later scope overrides an earlier one. Kept between
    runs (see CACHE_NAME) only when pip said which files it reads.
    """
    cached = _cached()
    if cached is not None:
        return cached
    out, files = _ask_pip()
    values = _parse(out)
    if files:
        try:
            write_json_atomic(_cache_file(), {"key": _key(files), "files": files, "values": values,
                                              "interpreter": sys.executable})
        except OSError:  # a cache that cannot be written costs time, never the answer
            pass
        _forget_gone_interpreters()
    return values


def _forget_gone_interpreters() -> None:
    """Remove the answers kept for interpreters that no longer exist. There is one per interpreter, and every
    fresh clone's nox sessions and every bench's environments are new interpreters: without this the folder only
    grows. Run only when pip was asked (a new answer was kept), so a warm run reads nothing more. An answer that
    names no interpreter (kept before the name was) is removed too: it costs one question to pip."""
    for path in cache_folder().glob(f"{CACHE_NAME}-*.json"):
        try:
            interpreter = json.loads(path.read_text(encoding="utf-8")).get("interpreter")
            if not (isinstance(interpreter, str) and os.path.exists(interpreter)):
                path.unlink()
        except (OSError, ValueError, AttributeError):  # another process's file, half-gone or not ours: left
            pass


def _parse(out: str) -> dict[str, str]:
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
    """The uv variables to add to `environ` so that uv sees what pip sees, and PyPI's cache policy where neither
    they nor the runner's owner configure uv or its index (indexcache.uv_setting); existing UV_* win."""
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
    extra.update(indexcache.uv_setting({**environ, **extra}, cache_folder()))
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
