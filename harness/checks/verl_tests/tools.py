"""The test tools of verl's suite (suite.toml), in an overlay folder for the check's pytest run only.

uv resolves the tools against the row's environment as installed (`uv pip install --dry-run`), with the uv
settings the harness forwards to its cells (index, find-links, constraints), so the overlay holds only what
the row lacks, at versions that go with what it has; a tool that would change one of the row's own
distributions is refused instead (the row must stay as installed). The overlay is installed with
`--target --no-deps` and kept under the cache folder per set of pins, so cells that lack the same tools share
it. The row's environment is never changed: the other checks see it as its pins made it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from harness.envs import pipconfig

from .selection import Tool
from .source import Unavailable, locked

UV_VARIABLE = "HARNESS_UV"  # the harness's uv binary, set by the harness for its checks
_ADDED = re.compile(r"^\s*\+\s+([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*$")
_REMOVED = re.compile(r"^\s*-\s+([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
UV_TIMEOUT = 900


@dataclass
class Overlay:
    path: Path | None  # None: the row already has every tool
    pins: list[str] = field(default_factory=list)  # what the overlay holds (tools and their dependencies)
    listed: list[dict[str, str]] = field(default_factory=list)  # per tool: requirement, reason, where it came from


def uv_binary(environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    given = environ.get(UV_VARIABLE)
    if given and Path(given).is_file():
        return given
    found = shutil.which("uv")
    if found is None:
        raise Unavailable("no uv on this runner to install the test tools (the harness sets HARNESS_UV for its "
                          "checks; `pip install uv` where it runs)")
    return found


def uv_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """uv's environment for the row's interpreter: the settings the harness forwards (pip's, where only PIP_*
    variables name them: a check run by hand), no Python download."""
    env = dict(os.environ if environ is None else environ)
    env.update(pipconfig.uv_environment(env))
    env.pop("VIRTUAL_ENV", None)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    return env


def _name(requirement: str) -> str:
    match = _NAME.match(requirement)
    return re.sub(r"[-_.]+", "-", match.group(0)).lower() if match else requirement


def missing(dry_run_output: str) -> tuple[list[str], list[str]]:
    """(pins uv would add, distributions of the row it would replace) from `uv pip install --dry-run`."""
    added, replaced = [], []
    for line in dry_run_output.splitlines():
        if match := _ADDED.match(line):
            added.append(f"{match.group(1)}=={match.group(2)}")
        elif match := _REMOVED.match(line):
            replaced.append(f"{match.group(1)}=={match.group(2)}")
    return added, replaced


def _uv(argv: list[str], environ: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=uv_environment(environ), timeout=UV_TIMEOUT,
                          check=False)
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[-600:]
        raise Unavailable(f"the test tools cannot be installed with this row's settings ({said})")
    return done.stdout + "\n" + done.stderr


def overlay(tools: list[Tool], cache: Path, python: str | None = None,
            environ: dict[str, str] | None = None) -> Overlay:
    """The overlay folder holding the tools the row lacks (installed once per set of pins)."""
    environ = dict(os.environ if environ is None else environ)
    python = python or sys.executable
    uv = uv_binary(environ)
    plan = _uv([uv, "pip", "install", "--dry-run", "--python", python, *[t.requirement for t in tools]], environ)
    pins, replaced = missing(plan)
    if replaced:
        raise Unavailable("the test tools would change the row's own distributions (" + ", ".join(replaced)
                          + "): not installed, so the row stays as its pins made it")
    path = None
    if pins:
        key = hashlib.sha256("\n".join([sys.version, *sorted(pins)]).encode()).hexdigest()[:16]
        path = cache / "tools" / key
        with locked(cache / "tools" / f"{key}.lock"):
            if not (path / ".complete").is_file():
                (cache / "tools").mkdir(parents=True, exist_ok=True)
                partial = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=cache / "tools"))
                _uv([uv, "pip", "install", "--target", str(partial), "--no-deps", "--python", python, *pins], environ)
                (partial / ".complete").write_text("\n".join(sorted(pins)) + "\n", encoding="utf-8")
                shutil.rmtree(path, ignore_errors=True)
                partial.replace(path)
    added = {_name(pin): pin for pin in pins}
    listed = []
    for tool in tools:
        name = _name(tool.requirement)
        if name in added:
            where = f"installed for this check: {added.pop(name)}"
        else:
            try:
                where = f"present in the row: {name}=={version(name)}"
            except PackageNotFoundError:
                where = "present in the row"
        listed.append({"requirement": tool.requirement, "reason": tool.reason, "source": where})
    for pin in added.values():  # the tools' own dependencies the row lacked
        listed.append({"requirement": pin, "reason": "a dependency of the tools above",
                       "source": f"installed for this check: {pin}"})
    return Overlay(path, sorted(pins), listed)
