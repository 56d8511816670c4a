"""`run --here` on an interpreter that has what an air-gapped box has and no more: its own pip, torch and
transformers, but no uv, no orjson and no docker (the harness's own requirements, which the box never got). The
row's package comes from the wheelhouse through the box's pip, the check runs, the report is written, and the
network is never reached (every proxy and index points at a closed port)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from wheel_helpers import here_toml, wheel, wheelhouse_manifest

from harness import matrix

ROOT = Path(__file__).resolve().parents[2]
ABSENT = ("uv", "orjson", "docker")  # what the harness needs elsewhere, and a box does not have

BLOCKER = f"""
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on this box)", name=name)
        return None

sys.meta_path.insert(0, Absent())
"""


def _box(folder: Path) -> Path:
    """A venv of this interpreter's base Python with pip (ensurepip, no network); this environment's packages
    reach it through a .pth file, and a finder makes uv, orjson and docker unimportable in every process."""
    base = getattr(sys, "_base_executable", sys.executable)
    done = subprocess.run([base, "-m", "venv", str(folder)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"this Python cannot make a venv with pip ({done.stderr.strip().splitlines()[-1:]})")
    python = folder / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_box_absent.py").write_text(BLOCKER)
    (site / "zz_box.pth").write_text(f"import _box_absent\n{sysconfig.get_paths()['purelib']}\n")
    return python


def _box_environment(tmp_path: Path) -> dict[str, str]:
    """No uv on PATH, no index or find-links of this machine, the network behind a closed port."""
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "uv").exists()]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "VIRTUAL_ENV"))}
    env.update(PATH=os.pathsep.join(path), PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"),
               PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_FIND_LINKS=str(tmp_path / "not-the-wheelhouse"))
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env[variable] = "http://127.0.0.1:9"
    return env


@pytest.mark.slow
def test_a_row_runs_on_a_box_with_only_its_own_pip(tmp_path):
    python = _box(tmp_path / "box")
    env = _box_environment(tmp_path)
    probe = subprocess.run([python, "-c", "import pip, torch, transformers\nfor m in ('uv', 'orjson', 'docker'):\n"
                            "    try: __import__(m)\n    except ModuleNotFoundError: print('absent', m)"],
                           capture_output=True, text=True, env=env, check=False)
    assert probe.returncode == 0 and probe.stdout.split() == ["absent", "uv", "absent", "orjson", "absent", "docker"]

    links = tmp_path / "wheels"
    links.mkdir()
    wheel(links, "tinypkg", "1.0")
    torch = subprocess.run([python, "-c", "import torch; print(torch.__version__.split('+')[0])"],
                           capture_output=True, text=True, env=env, check=True).stdout.strip()
    transformers = subprocess.run([python, "-c", "import transformers; print(transformers.__version__)"],
                                  capture_output=True, text=True, env=env, check=True).stdout.strip()
    (tmp_path / "box.toml").write_text(here_toml(torch, transformers))
    cell = next(c.id for c in matrix.load(tmp_path / "box.toml").cells if c.axes["model"] == "vl")
    version = subprocess.run([python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
                             capture_output=True, text=True, env=env, check=True).stdout.strip()
    wheelhouse_manifest(links, {cell: ["tinypkg==1.0"]}, version)
    out = tmp_path / "out"
    done = subprocess.run([python, "-m", "harness", "run", str(tmp_path / "box.toml"), "--here", "--wheelhouse",
                           str(links), "--cells", cell, "--out", str(out), "--env-root", str(tmp_path / "envs"),
                           "--no-fork"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "cells" / f"{cell}.json").read_text())
    assert result["checks"][0]["status"] == "pass", result["checks"][0]["message"]
    setup_log = (out / result["setup_log"]).read_text() if result.get("setup_log") else ""
    assert "-m pip install" in setup_log and "--no-index" in setup_log
    assert (tmp_path / "envs" / "overlays" / cell / "tinypkg" / "__init__.py").is_file()
    report = json.loads((out / "report.json").read_text())  # written without orjson
    assert report and (out / "report.md").is_file()
