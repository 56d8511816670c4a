"""Find the Python interpreter a cell names (its `python` axis) on this machine; never download one.

uv fetches a managed Python when it cannot find the version it is asked for, and no download can
succeed on these runners; pyenv's shims (`python3.12`) refuse to run unless that version is
selected. So the harness finds a real interpreter itself and gives uv its path: the harness's own
interpreter, `pythonX.Y` on PATH, or a pyenv installation (`$(pyenv root)/versions/*`, read without
running pyenv). Every candidate is run once to read its version, so a refusing shim is passed over.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

_PROBE = "import sys; print('.'.join(map(str, sys.version_info[:3])))"


class InterpreterMissing(LookupError):
    """No interpreter of the wanted version on this machine; the message says where the search looked."""


@dataclass(frozen=True)
class Interpreter:
    path: str
    version: str  # X.Y.Z, as the interpreter itself reports it


def matches(found: str, wanted: str) -> bool:
    """'3.12' is any 3.12.x; '3.12.1' is exactly that release."""
    return found == wanted or found.startswith(wanted + ".")


def version_of(path: str | Path) -> str | None:
    """The X.Y.Z version `path` reports when run, or None if it does not run (a refusing shim)."""
    try:  # -I: PYTHON* variables and the user's site could make a candidate fail or lie
        done = subprocess.run([str(path), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def pyenv_roots(environ: dict[str, str]) -> list[Path]:
    """Where pyenv keeps its versions (what `pyenv root` answers): $PYENV_ROOT, and ~/.pyenv."""
    roots = [environ.get("PYENV_ROOT", ""), str(Path(environ["HOME"]) / ".pyenv") if environ.get("HOME") else ""]
    return [Path(r) for r in dict.fromkeys(r for r in roots if r)]


def _release(name: str) -> Version | None:
    try:
        return Version(name)
    except InvalidVersion:
        return None  # pyenv also holds conda, pypy and virtualenvs: not CPython releases


def _candidates(wanted: str, environ: dict[str, str]) -> tuple[list[str], list[str]]:
    """(paths to try, newest pyenv release first; what was searched, for the skip reason)."""
    short = ".".join(wanted.split(".")[:2])
    paths, searched = [], []
    on_path = shutil.which(f"python{short}", path=environ.get("PATH"))
    searched.append(f"PATH (python{short}{': ' + on_path if on_path else ': none'})")
    if on_path:
        paths.append(on_path)
    for root in pyenv_roots(environ):
        versions = root / "versions"
        found = sorted(((v, d) for d in (versions.iterdir() if versions.is_dir() else ())
                        if (v := _release(d.name)) is not None), reverse=True)
        names = ", ".join(d.name for _, d in sorted(found)) or "none"
        searched.append(f"pyenv {versions} (has {names})")
        paths += [str(d / "bin" / f"python{short}") for v, d in found if matches(str(v), wanted)]
    return paths, searched


@functools.lru_cache(maxsize=32)
def _find(wanted: str, path_var: str, pyenv_root: str, home: str) -> Interpreter:
    own = ".".join(map(str, sys.version_info[:3]))
    if matches(own, wanted):
        return Interpreter(sys.executable, own)
    environ = {"PATH": path_var, "PYENV_ROOT": pyenv_root, "HOME": home}
    paths, searched = _candidates(wanted, environ)
    refused = []
    for path in dict.fromkeys(paths):
        version = version_of(path)
        if version and matches(version, wanted):
            return Interpreter(path, version)
        refused.append(f"{path} ({'runs ' + version if version else 'does not run'})")
    tried = f"; tried and passed over: {', '.join(refused)}" if refused else ""
    raise InterpreterMissing(f"Python {wanted} is not on this runner (the harness runs on {own}; searched "
                             f"{'; '.join(searched)}{tried}); install it (e.g. `pyenv install {wanted}`) "
                             f"or run this cell on a runner that has it")


def find(wanted: str, environ: dict[str, str] | None = None) -> Interpreter:
    """The interpreter of version `wanted` ('3.12' or '3.12.1'); InterpreterMissing says where it looked."""
    environ = os.environ if environ is None else environ
    return _find(wanted, environ.get("PATH", ""), environ.get("PYENV_ROOT", ""), environ.get("HOME", ""))
