"""The interpreter an offline run uses (`run --here`): what it has, whether a row may run on it, and a row's
environment on it.

What it has is a `pip freeze` style list (name==version, one a line), read from a file (the box's, where the
wheelhouse is built) or taken from the running interpreter. No environment is built and nothing is fetched: what a
row needs beyond the interpreter's own packages is installed from the wheelhouse alone, the files its manifest
names by path (`--no-index --no-deps`), into a folder of its own that comes first on the checks' PYTHONPATH, so the
interpreter itself is never changed and two rows with two transformers can run one after the other. A row whose
declared versions the interpreter does not have (and the wheelhouse does not add) is refused before anything runs.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.envs import cellenv
from harness.envs.cellenv import die_with_parent
from harness.errors import InputError
from harness.files import write_text_atomic
from harness.matrix import Cell

from .manifest import wheel_paths


def read(path: Path) -> dict[str, str]:
    """Canonical name -> version of each `name==version` line; comments, blank lines and options are skipped, a
    `name @ url` line (a local build) has no version to match and is refused with its line number."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the package list ({exc})") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
            specs = list(req.specifier)
            if req.url or len(specs) != 1 or specs[0].operator not in ("==", "==="):
                raise InvalidRequirement("expected name==version")
            Version(specs[0].version)
        except (InvalidRequirement, InvalidVersion) as exc:  # packaging's message points at the column below
            raise InputError(f"{path}, line {number}: {line[:80]!r} is not a name==version line "
                             f"({str(exc).splitlines()[0][:120]})") from None
        found[canonicalize_name(req.name)] = specs[0].version
    if not found:
        raise InputError(f"{path}: no name==version line; write the box's `pip freeze` into it")
    return found


def current() -> dict[str, str]:
    """Canonical name -> version of every distribution this interpreter imports from (first one found wins,
    as the import system's order does)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def same_release(have: str | None, wanted: str) -> bool:
    """2.11.0+cu130 is the 2.11.0 a row declares: the local build label names the box's build, not another release."""
    if have is None:
        return False
    try:
        return Version(have).public == Version(wanted).public
    except InvalidVersion:
        return have == wanted


def interpreter_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"


def mismatches(cell: Cell, manifest: dict, have: dict[str, str], python: str) -> list[str]:
    """One line per way the interpreter (`have`, `python`) is not what the row declares, given what the wheelhouse
    adds; [] when it may run."""
    entry = manifest["cells"].get(cell.id)
    if entry is None:
        return [f"the wheelhouse was not built for this row; build it with `python -m harness wheelhouse ... "
                f"--cells {cell.id}`"]
    added = {canonicalize_name(pin.split("==", 1)[0]): pin.split("==", 1)[1] for pin in entry.get("add", [])}
    wrong = []
    for dist, version in cell.pinned_releases().items():
        name = canonicalize_name(dist)
        if name in added:
            if not same_release(added[name], version):
                wrong.append(f"{dist}: the wheelhouse holds {added[name]}, the row declares {version}")
        elif not same_release(have.get(name), version):
            wrong.append(f"{dist}: the interpreter has {have.get(name) or 'none'}, the row declares {version}")
    # The row's own Python where it names one, else the one the wheelhouse was built for: each said as what it is.
    wanted, whose = (cell.python, "the row declares") if cell.python else (
        str(manifest["target"]["python"]), "the wheelhouse was built for")
    if not (python == wanted or python.startswith(wanted + ".")):
        wrong.append(f"python: the interpreter is {python}, {whose} {wanted}")
    return wrong


def refuse_mismatches(cells: list[Cell], manifest: dict, have: dict[str, str], python: str, source: str) -> None:
    """InputError (exit 2) naming the first row the interpreter does not match, and how."""
    for cell in cells:
        wrong = mismatches(cell, manifest, have, python)
        if wrong:
            raise InputError(f"{source} is not row {cell.id}: {'; '.join(wrong)}; refusing to run it here")


@dataclass(frozen=True)
class InterpreterEnv(cellenv.CellEnv):
    """The interpreter at hand, with a row's overlay of wheelhouse packages first on the path."""

    overlay: Path | None = None
    # execution/cell.py records it as the row's origin line (the result's environment["origin"])
    origin: str = ""

    @property
    def python(self) -> Path:
        return Path(sys.executable)

    def run_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = super().run_env(extra)
        env.pop("VIRTUAL_ENV", None)
        if self.overlay is not None:
            env["PYTHONPATH"] = os.pathsep.join((str(self.overlay), env["PYTHONPATH"]))
        return env


def installer(wheels: list[Path], overlay: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) installing exactly the wheel files `wheels` (by path: the manifest's files, hashed and
    checked) for this interpreter into `overlay`: with its own pip where it has one (a box has pip, and nothing
    else need arrive for installing), else with uv. Either way no index and no folder is searched, nothing a wheel
    requires is added, and no configuration of this machine (an index, find-links, constraints) takes part."""
    options = ["--no-index", "--no-deps", "--target", str(overlay)]
    paths = [str(Path(wheel).resolve()) for wheel in wheels]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    if importlib.util.find_spec("pip") is not None:
        env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf: its index, find-links or constraints
        return [sys.executable, "-m", "pip", "install", "--no-compile", "--disable-pip-version-check",
                "--no-cache-dir", *options, *paths], env
    env.update({k: v for k, v in cellenv.uv_process_env().items()
                if not k.startswith(("UV_INDEX", "UV_FIND_LINKS", "UV_DEFAULT_INDEX"))})
    return [cellenv.uv_binary(), "pip", "install", "--python", sys.executable, *options, *paths], env


def install_overlay(wheels: list[Path], overlay: Path, log) -> None:
    """The wheel files `wheels` into `overlay` (nothing is fetched), unless exactly they are there already."""
    marker = overlay / ".harness-overlay.json"
    wanted = sorted(Path(wheel).name for wheel in wheels)
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == wanted:
        return
    shutil.rmtree(overlay, ignore_errors=True)  # another row's set, or a broken install: start empty
    argv, env = installer(wheels, overlay)
    log.write(f"$ {' '.join(argv)}\n".encode())
    log.flush()
    done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, check=False, preexec_fn=die_with_parent)
    if done.returncode != 0:
        raise cellenv.SetupFailed(f"installing {', '.join(wanted)} from the wheelhouse failed (status "
                                  f"{done.returncode})")
    write_text_atomic(marker, json.dumps(wanted))


def _lock(overlay: Path | None) -> str:
    """The interpreter's packages, those of the overlay in their place."""
    added = {}
    if overlay is not None:
        for dist in importlib.metadata.distributions(path=[str(overlay)]):
            added[canonicalize_name(dist.metadata["Name"])] = f"{dist.metadata['Name']}=={dist.version}"
    lines = [f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()
             if dist.metadata["Name"] and canonicalize_name(dist.metadata["Name"]) not in added]
    return "\n".join(sorted({*lines, *added.values()}, key=str.lower)) + "\n"


def preparer(manifest: dict, wheelhouse: Path, overlays: Path):
    """The `prepare` of RunOptions for a run here: (environment, lock) of a row."""
    files = len(manifest.get("files", []))
    size = manifest.get("total_bytes", 0) / (1024 * 1024)

    def prepare(cell: Cell, setup_log: Path) -> tuple[InterpreterEnv, str]:
        pins = list(manifest["cells"][cell.id].get("add", []))
        overlay = (overlays / cell.id).resolve() if pins else None
        setup_log.parent.mkdir(parents=True, exist_ok=True)
        if overlay is not None:
            with open(setup_log, "ab") as log:
                install_overlay(wheel_paths(wheelhouse, manifest, pins), overlay, log)
        origin = (f"offline run on the box's own Python {interpreter_python()}, "
                  f"{len(pins)} packages from a wheelhouse of {files} wheels ({size:.1f} MiB)")
        return InterpreterEnv(Path(sys.prefix), overlay, origin), _lock(overlay)

    return prepare
