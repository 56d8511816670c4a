"""A newcomer's run (`nox -s bench -- --only newcomer`): the README's first command, timed, as on a fresh machine.

The matrix bench (matrix.py) warms uv's cache first, so its figures leave out what a newcomer's machine pays on
its first `nox`: downloading every cell's packages, unpacking them into uv's cache, fetching Python 3.12. This
bench does what the newcomer does, in a work folder of its own:

- a fresh clone of this project's committed HEAD;
- empty caches: uv's cache and Python installs, pip's, the harness's own (XDG_CACHE_HOME), none of this machine's;
- a new virtual environment from the machine's Python, as a newcomer's bare Python, then the README's command in
  it: `python -m pip install 'nox[uv]' && nox`;
- then a second `nox`, which should find every cell done.

What it cannot make fresh is said beside the figures: the machine's memory (files read earlier may still be cached
by this machine or its host) and the network (a package proxy near the machine serves faster than PyPI from
afar). The run's breakdown (phases and checks, from the clone's results) is the matrix bench's (phases.py).
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness.envs.cellenv import die_with_parent

from . import phases
from .matrix import cpu_shares, cpu_times

ROOT = Path(__file__).resolve().parents[2]  # harness/<room>/this.py -> the project
COMMAND = "python -m pip install 'nox[uv]' && nox"  # the README's first command
NOT_FRESH = ("the machine's memory: files read before this run may still be cached by this machine or its host",
             "the network: the package index this machine reaches, at its speed")
# Variables a newcomer's shell would not have: set by the bench's own nox session (its environment, uv's
# settings forwarded from pip) or naming caches this bench replaces.
_DROPPED = ("VIRTUAL_ENV", "NOX_CURRENT_SESSION", "UV_CACHE_DIR", "UV_PYTHON_INSTALL_DIR", "UV_OFFLINE",
            "UV_FIND_LINKS", "UV_CONSTRAINT", "UV_DEFAULT_INDEX", "UV_INDEX_STRATEGY", "PIP_CACHE_DIR",
            "XDG_CACHE_HOME", "PYTHONPATH")


def newcomer_environment(environ: dict[str, str], work: Path) -> dict[str, str]:
    """The environment a newcomer's shell would have on this machine: no virtual environment active, the bench's
    own environment off PATH, and every cache empty, in `work`."""
    env = {key: value for key, value in environ.items() if key not in _DROPPED}
    active = environ.get("VIRTUAL_ENV")
    if active:
        env["PATH"] = os.pathsep.join(part for part in environ.get("PATH", "").split(os.pathsep)
                                      if part and Path(part).parent != Path(active))
    env.update({"UV_CACHE_DIR": str(work / "uv-cache"), "UV_PYTHON_INSTALL_DIR": str(work / "uv-python"),
                "XDG_CACHE_HOME": str(work / "cache")})
    return env


def machine_python(env: dict[str, str]) -> str | None:
    """The machine's Python 3, as the newcomer's PATH finds it."""
    return shutil.which("python3", path=env.get("PATH")) or shutil.which("python", path=env.get("PATH"))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _step(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, float]:
    start = time.perf_counter()
    with open(log, "ab") as sink:
        sink.write(f"$ {' '.join(argv)}\n".encode())
        sink.flush()
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, check=False,
                              preexec_fn=die_with_parent)
    return done.returncode, round(time.perf_counter() - start, 2)


def _revision(clone: Path) -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=clone, capture_output=True, text=True,
                              check=False)
    except OSError:  # no clone to ask
        return None
    return done.stdout.strip() or None


def run(work: Path, root: Path = ROOT, environ: dict[str, str] | None = None) -> dict:
    """The newcomer's two commands in `work` (which ends up holding the clone and every cache)."""
    work.mkdir(parents=True, exist_ok=True)
    env = newcomer_environment(dict(os.environ if environ is None else environ), work)
    log, clone = work / "newcomer.log", work / "clone"
    figures: dict = {"command": COMMAND, "not_fresh": list(NOT_FRESH), "load_average_start":
                     [round(x, 2) for x in os.getloadavg()]}
    python = machine_python(env)
    if python is None:
        return {**figures, "error": "no python3 on PATH"}
    status, _ = _step(["git", "clone", "-q", str(root), str(clone)], work, env, log)
    if status:
        return {**figures, "error": f"git clone exited {status}", "log_tail": _tail(log)}
    figures["clone_revision"] = _revision(clone)
    status, _ = _step([python, "-m", "venv", str(work / "python")], work, env, log)
    if status:
        return {**figures, "error": f"python -m venv exited {status}", "log_tail": _tail(log)}
    bare = work / "python" / "bin"
    env["PATH"] = os.pathsep.join([str(bare), env.get("PATH", "")])
    disk_before, cpu_before, stat_before = shutil.disk_usage(work).used, _children_cpu(), cpu_times()
    status, pip_s = _step([str(bare / "python"), "-m", "pip", "install", "-q", "nox[uv]"], clone, env, log)
    figures.update({"pip_install_nox_s": pip_s, "pip_exit_status": status})
    if status:
        return {**figures, "error": f"pip install exited {status}", "log_tail": _tail(log)}
    status, nox_s = _step([str(bare / "nox")], clone, env, log)
    figures.update({"wall_s": round(pip_s + nox_s, 2), "nox_s": nox_s, "exit_status": status,
                    "cpu_seconds": round(_children_cpu() - cpu_before, 1), **cpu_shares(stat_before, cpu_times()),
                    "disk_growth_gib": round((shutil.disk_usage(work).used - disk_before) / 2**30, 1)})
    figures.update(phases.breakdown({}, phases.snapshot(clone / "reports" / "cpu")))
    second_status, second_s = _step([str(bare / "nox")], clone, env, log)
    figures.update({"second_nox_s": second_s, "second_exit_status": second_status})
    if status or second_status:
        figures["log_tail"] = _tail(log)
    return figures


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-1500:] if log.exists() else ""


def describe(figures: dict) -> str:
    if "error" in figures:
        return f"newcomer: {figures['error']}"
    return (f"newcomer ({figures['command']}, clone {figures.get('clone_revision')}): {figures.get('wall_s')} s "
            f"(pip {figures.get('pip_install_nox_s')} s, nox {figures.get('nox_s')} s, exit "
            f"{figures.get('exit_status')}; {figures.get('cells_run')} cells; {figures.get('cpu_seconds')} s of CPU, "
            f"busy {figures.get('cpu_busy_percent')}%; the disk {figures.get('disk_growth_gib')} GiB fuller); "
            f"a second nox {figures.get('second_nox_s')} s")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m harness.benchmarks.newcomer", description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="keep the clone and caches here (default: removed)")
    args = parser.parse_args(argv)
    if args.work is not None:
        figures = run(args.work.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="harness-newcomer-") as tmp:
            figures = run(Path(tmp))
    print(describe(figures), file=sys.stderr)
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
