"""Inside a cell's container: give the harness its own dependencies, then run that one cell.

Started by `harness.envs.container` as `python3 -m harness.envs.incontainer BOOTSTRAP_VENV run MATRIX ...` with the
image's own Python and the standard library only. The repository is mounted read-only, so nothing is
installed into it: the harness's dependencies from pyproject.toml (packaging, tabulate, uv) go into a
venv in the writable env mount, made once and reused while the image's Python and the list are the same.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # harness/<room>/this.py -> the project
NOT_INSIDE = {"docker"}  # the run inside the container starts no containers
MARKER = ".harness-bootstrap.json"


def needs(root: Path = ROOT) -> list[str]:
    """The project's run-time dependencies, minus those only the host side uses."""
    deps = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return [d for d in deps if re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0].lower() not in NOT_INSIDE]


def bootstrap(venv: Path) -> Path:
    """The bootstrap venv's interpreter, created (venv + pip) when missing or made for another Python."""
    python = venv / "bin" / "python"
    wanted = {"python": sys.version, "executable": sys.executable, "needs": needs()}
    try:
        fresh = json.loads((venv / MARKER).read_text()) != wanted or not python.exists()
    except (OSError, ValueError):
        fresh = True
    if fresh:
        print(f"bootstrap: {venv} <- {' '.join(wanted['needs'])}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        *wanted["needs"]], check=True)
        (venv / MARKER).write_text(json.dumps(wanted))
    return python


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python3 -m harness.envs.incontainer BOOTSTRAP_VENV HARNESS_ARGS...", file=sys.stderr)
        return 2
    try:
        python = bootstrap(Path(argv[0]))
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"bootstrap failed: {exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    # Replace this process, so that the container's stop signal reaches the harness run directly.
    os.execv(python, [str(python), "-m", "harness", *argv[1:]])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
