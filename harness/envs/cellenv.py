"""One virtual environment per cell, with exactly the cell's pins, built by uv, and the child processes that
run in it, which die with the harness.

Environments live under an env root (default `.harness/envs`) keyed by cell id and reused
when their pins have not changed (a warm start is a uv audit, well under a second). The project
itself is not installed into them: checks run with the project on PYTHONPATH, so a cell holds
exactly its pins and what they depend on (plus `packaging`, the one thing the harness imports).

A runner killed with SIGKILL cannot clean up: its uv installs, environment captures and checks would run on
as orphans, writing into a results directory nobody is running any more. On Linux the kernel can send the
child SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG); every child the harness starts asks for that,
through `die_with_parent`.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from harness.errors import EnvironmentMissing
from harness.files import write_text_atomic

from . import bytecode, deathsig, importrecord, pipconfig

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # harness/<room>/this.py -> the project
HARNESS_NEEDS = ("packaging",)
MARKER = ".harness-env.json"
OVERRIDES = ".harness-overrides.txt"  # the install recipe's override lines, as uv reads them


def die_with_parent() -> None:
    """A `preexec_fn`, run in the child before exec: SIGKILL when the process that started it dies."""
    deathsig.on_parent_death(signal.SIGKILL)


class SetupFailed(RuntimeError):
    """Installing a cell's environment failed; the message holds the tail of the log."""


def uv_binary() -> str:
    """uv next to this interpreter (the `uv` package's script), else on PATH."""
    beside = Path(sys.executable).parent / ("uv.exe" if os.name == "nt" else "uv")
    if beside.is_file():
        return str(beside)
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except Exception:  # noqa: BLE001 - its lookup has failed on some builds (sysconfig EXE None): use PATH
        found = shutil.which("uv")
        if not found:
            raise EnvironmentMissing(
                "uv not found: `pip install uv` (the harness builds cell environments with it)") from None
        return found


@dataclass(frozen=True)
class CellEnv:
    path: Path

    @property
    def python(self) -> Path:
        return self.path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    def run_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a check runs in: the project importable, one CPU thread."""
        env = dict(os.environ)
        env.pop("PYTHONHOME", None)
        # The environment is the harness's own: its bytecode is kept, so that a check process does not compile
        # torch, transformers or megatron-core again (tens of seconds each) where the caller turned that off.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["VIRTUAL_ENV"] = str(self.path)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PATH"] = os.pathsep.join((str(self.python.parent), env.get("PATH", "")))
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: models are built from configs
        # torch-npu, once installed, breaks a plain `import torch` on machines without CANN.
        env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        env.update(extra or {})
        return env


def uv_process_env() -> dict[str, str]:
    """The environment every uv call of the harness runs in: pip's settings forwarded, no active
    virtualenv, and never a Python download (cells give uv an interpreter by path, found by
    `interpreters`; a download cannot succeed on these runners and must not be tried)."""
    env = {**os.environ, **pipconfig.uv_environment(), "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)
    return env


# The settings of uv's that decide what it can install here, besides the pins themselves.
_INSTALL_SETTINGS = ("UV_CONSTRAINT", "UV_FIND_LINKS", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL",
                     "UV_INDEX", "UV_OFFLINE", "UV_NO_BUILD", "UV_ONLY_BINARY")


def runner_constraint_files() -> list[str]:
    """The constraint files the cells are installed under: UV_CONSTRAINT, else pip's `constraint` setting, which
    the installs forward to uv (pipconfig.uv_environment) whether or not the harness's own environment names it."""
    return {**os.environ, **pipconfig.uv_environment()}.get("UV_CONSTRAINT", "").split()


def runner_install_facts() -> dict:
    """What this runner brings to an install: its platform, C library and host, and the uv settings (pip's
    included) with the contents of the constraint files they name. A cell that could not be installed here is
    tried again only when these or its own inputs change."""
    settings = {**os.environ, **pipconfig.uv_environment()}
    facts: dict = {"platform": [platform.system(), platform.machine(), *platform.libc_ver()],
                   "host": socket.gethostname(),
                   "settings": {name: settings[name] for name in _INSTALL_SETTINGS if settings.get(name)}}
    constraints = {}
    for name in settings.get("UV_CONSTRAINT", "").split():  # runner_constraint_files, without asking pip's again
        try:
            constraints[name] = hashlib.sha256(Path(name).read_bytes()).hexdigest()
        except OSError:
            constraints[name] = "unreadable"
    facts["constraints"] = constraints
    return facts


def _fingerprint(requirements: list[str], python: str) -> str:
    return hashlib.sha256(json.dumps([sorted(requirements), python]).encode()).hexdigest()[:16]


def _run_logged(argv: list[str], log, env: dict[str, str]) -> None:
    log.write(f"$ {' '.join(argv)}\n".encode())
    log.flush()
    done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, check=False,
                          preexec_fn=die_with_parent)
    if done.returncode != 0:
        raise SetupFailed(f"`{Path(argv[0]).name} {' '.join(argv[1:3])}` exited with status {done.returncode}")


def index_releases(pins) -> list[str]:
    """Exact pins (`torch==2.13.0`) as override lines for the package index's release: `torch===2.13.0`, whose
    arbitrary equality (PEP 440) no local build such as 2.13.0+cpu satisfies, where `==2.13.0` would."""
    return [f"{req.name}==={next(iter(req.specifier)).version}" for req in map(Requirement, pins)]


def with_index_pins(requirements: list[str], from_index) -> list[str]:
    """What one install names: the requirements, then the recipe's from_index pins not among them (installed in
    the same resolution, as the index's release through `index_releases`)."""
    return list(requirements) + [pin for pin in from_index if pin not in requirements]


def uv_override_args(lines, path: Path) -> list[str]:
    """uv's `--override FILE` for an install recipe's override lines (its `exclude`), FILE written at `path`;
    no arguments and no file where there are none."""
    if not lines:
        return []
    write_text_atomic(path, "".join(f"{line}\n" for line in lines))
    return ["--override", str(path)]


def build(cell_id: str, requirements: list[str], env_root: Path, log_path: Path,
          python: str | None = None, from_index: tuple[str, ...] = (), remove: tuple[str, ...] = (),
          from_source: tuple[str, ...] = (), build_env: tuple[tuple[str, str], ...] = (),
          overrides: tuple[str, ...] = (), uv_env: dict[str, str] | None = None,
          seed_bytecode: bool = True) -> CellEnv:
    """Create or reuse the environment of one cell on the interpreter at path `python` (default: the
    harness's own); raise SetupFailed with the log's tail.

    The other arguments are a cell's install recipe (harness/matrix/recipe.py): `from_index`, exact pins
    installed with the others as the package index's release (never a local build: the override file says
    `torch===2.13.0`), then pins built from source with `build_env`, then distributions removed. `overrides` are
    the lines of uv's --override file (InstallRecipe.overrides: `exclude` left out of the pins' resolution by a
    never-true marker, pins outside a crossed package's range, `from_index` as the index's release). `uv_env`: uv's
    environment instead of `uv_process_env()` (the CPU pre-flight installs with the runner's index settings).
    `seed_bytecode=False` leaves linking the shared bytecode to the caller (a matrix run does it when the cell starts).
    """
    python = python or sys.executable
    env = CellEnv(Path(env_root) / cell_id)
    wanted = {"requirements": sorted(requirements + list(HARNESS_NEEDS)),
              "fingerprint": _fingerprint(requirements, python)}
    if from_index or remove or from_source or overrides:
        wanted["recipe"] = {"from_index": list(from_index), "remove": list(remove), "from_source": list(from_source),
                            "build_env": dict(build_env), "overrides": list(overrides)}
    uv, uv_env = uv_binary(), uv_process_env() if uv_env is None else uv_env
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            marker = env.path / MARKER
            fresh = not (marker.exists() and json.loads(marker.read_text()) == wanted and env.python.exists())
            if fresh:
                marker.unlink(missing_ok=True)
                _run_logged([uv, "venv", "--quiet", "--clear", "--python", python, str(env.path)], log, uv_env)
            # written after `uv venv --clear`, inside the environment it describes
            lines = list(overrides) + [line for line in index_releases(from_index) if line not in overrides]
            override_args = uv_override_args(lines, env.path / OVERRIDES)
            pins = with_index_pins(wanted["requirements"], from_index)
            if fresh or "recipe" not in wanted:  # a recipe's result would not pass a second audit of the pins
                _run_logged([uv, "pip", "install", "--python", str(env.python), *override_args, *pins], log, uv_env)
            if fresh and from_source:
                names = [arg for pin in from_source for arg in ("--no-binary", pin.split("==")[0])]
                _run_logged([uv, "pip", "install", "--python", str(env.python), *names, *from_source], log,
                            {**uv_env, **dict(build_env)})
            if fresh and remove:
                _run_logged([uv, "pip", "uninstall", "--python", str(env.python), *remove], log, uv_env)
            write_text_atomic(marker, json.dumps(wanted))
            install_import_recorder(env)
            if seed_bytecode:
                share_bytecode(env, "seed", env_root)
        except (SetupFailed, OSError, ValueError) as exc:
            log.flush()
            raise SetupFailed(f"{exc}: {tail(log_path)}") from exc
    return env


def site_packages(env: CellEnv) -> list[Path]:
    """The environment's site-packages directories (one on Linux and macOS)."""
    return sorted(env.path.glob("lib/python*/site-packages")) + sorted(env.path.glob("Lib/site-packages"))


def share_bytecode(env: CellEnv, action: str, env_root: Path) -> None:
    """Bytecode shared between environments (envs/bytecode.py), run by the environment's own interpreter: `seed`
    links into it what the store holds, `keep` stores what it compiled. A failure costs compile time, nothing else."""
    argv = [str(env.python), "-m", "harness.envs.bytecode", action, str(bytecode.store_for(env_root).resolve()),
            *map(str, site_packages(env))]
    try:
        subprocess.run(argv, env=env.run_env(), capture_output=True, timeout=120, check=False,
                       preexec_fn=die_with_parent)
    except (OSError, subprocess.TimeoutExpired):
        pass


def install_import_recorder(env: CellEnv) -> None:
    """Put importrecord.py into the environment with a .pth line that starts it only when a check's
    process has HARNESS_IMPORT_RECORD set, or a fork server HARNESS_IMPORT_GRAPH (every other use of the
    environment pays two dict lookups)."""
    source = Path(importrecord.__file__).read_text(encoding="utf-8")
    line = (f"import os; (os.environ.get({importrecord.VARIABLE!r}) or os.environ.get({importrecord.GRAPH_VARIABLE!r}))"
            f" and __import__({importrecord.INSTALLED_AS!r})\n")
    for directory in site_packages(env):
        for path, text in ((directory / f"{importrecord.INSTALLED_AS}.py", source),
                           (directory / f"{importrecord.INSTALLED_AS}.pth", line)):
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                write_text_atomic(path, text)


def build_from_lock(name: str, lock: Path, env_root: Path, log_path: Path, python: str | None = None) -> CellEnv:
    """An environment with exactly the packages of a recorded lock (`uv pip sync`), for repro."""
    env = CellEnv(Path(env_root) / name)
    uv, uv_env = uv_binary(), uv_process_env()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            _run_logged([uv, "venv", "--quiet", "--clear", "--python", python or sys.executable, str(env.path)], log,
                        uv_env)
            _run_logged([uv, "pip", "sync", "--python", str(env.python), str(lock)], log, uv_env)
        except SetupFailed as exc:
            log.flush()
            raise SetupFailed(f"{exc}: {tail(log_path)}") from exc
    return env


def freeze(env: CellEnv) -> str:
    """The resolved lock of the environment (`uv pip freeze`), for the report and for repro."""
    done = subprocess.run([uv_binary(), "pip", "freeze", "--python", str(env.python)], capture_output=True,
                          text=True, check=False, env=uv_process_env(), preexec_fn=die_with_parent)
    if done.returncode != 0:
        raise SetupFailed(f"uv pip freeze failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def tail(path: Path, lines: int = 30, max_chars: int = 4000) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-max_chars:]
