"""The `python` axis: expansion and ids, rules on it, bad values, finding the interpreter on the
machine (never letting uv download one), and a missing interpreter as `skip` (a real cell on 3.12:
tests/e2e/test_python_axis_cell.py)."""
import json
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from matrix_helpers import VALID as BASE  # a one-cell fsdp matrix: transformers 5.3.0, torch 2.13.0
from matrix_helpers import load_text

from harness.envs import cellenv, interpreters
from harness.errors import InputError

ROOT = Path(__file__).resolve().parents[4]
INCLUDE_312 = textwrap.dedent("""\

    [[include]]
    backend = "megatron"
    megatron_core = "0.19.2"
    python = "3.12"
    """)


def test_cells_without_the_axis_keep_their_ids_and_named_ones_get_a_py_part(tmp_path):
    m = load_text(tmp_path, BASE + INCLUDE_312)
    assert [c.id for c in m.cells] == ["fsdp-text-tf5.3.0-torch2.13.0",
                                       "megatron-text-tf5.3.0-torch2.13.0-mcore0.19.2-py3.12"]
    old, new = m.cells
    assert "python" not in old.axes and old.python is None  # the harness's own interpreter
    assert new.axes["python"] == "3.12" and new.python == "3.12"
    assert new.requirements == ["torch==2.13.0", "transformers==5.3.0", "megatron-core==0.19.2"]


def test_the_axis_expands_like_any_other(tmp_path):
    m = load_text(tmp_path, BASE.replace('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.11", "3.12"]'))
    assert [c.id for c in m.cells] == ["fsdp-text-tf5.3.0-torch2.13.0-py3.11", "fsdp-text-tf5.3.0-torch2.13.0-py3.12"]


def test_matrix_python_is_the_default_interpreter_and_rules_see_it(tmp_path):
    text = BASE.replace('checks = ["stack-smoke"]', 'checks = ["stack-smoke"]\npython = "3.11"') + INCLUDE_312 + \
        textwrap.dedent("""
        [[tags]]
        tag = "py312"
        when = { python = ">=3.12" }

        [[tags]]
        tag = "py311"
        when = { python = "<3.12" }
        """)
    m = load_text(tmp_path, text)
    old, new = m.cells
    assert old.id == "fsdp-text-tf5.3.0-torch2.13.0" and old.python == "3.11" and "python" not in old.axes
    assert "py311" in old.tags and "py312" not in old.tags
    assert "py312" in new.tags and "py311" not in new.tags


def test_rules_select_and_exclude_by_python_version(tmp_path):
    text = BASE.replace('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.11", "3.12", "3.13"]') + textwrap.dedent("""
        [[exclude]]
        python = "==3.13"

        [[tags]]
        tag = "new-python"
        when = { python = ">=3.12" }
        """)
    m = load_text(tmp_path, text)
    assert [c.axes["python"] for c in m.cells] == ["3.11", "3.12"]
    assert [c.axes["python"] for c in m.select(tags=["new-python"])] == ["3.12"]


@pytest.mark.parametrize("edit, expected", [
    (('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.x"]'), r"m.toml \(line 11\): axes.python: '3.x' is not"),
    (('device = ["cpu"]', 'device = ["cpu"]\npython = ["python3.12"]'), r"axes.python: 'python3.12' is not"),
    (('device = ["cpu"]', 'device = ["cpu"]\npython = ["--index-url=x"]'), r"axes.python: '--index-url=x' is not"),
    (('device = ["cpu"]', 'device = ["cpu"]\npython = [3.12]'), r"axes.python: expected a non-empty list of strings"),
    (('device = ["cpu"]', 'device = ["cpu"]\n\n[[tags]]\ntag = "x"\nwhen = { python = ">=three" }'),
     r"tags\[0\].when.python: invalid version specifier"),
    (('checks = ["stack-smoke"]', 'checks = ["stack-smoke"]\npython = "3.11"\n[axes]\npython = ["3.12"]'), None),
])
def test_bad_python_values_are_one_line_errors_naming_file_and_line(tmp_path, edit, expected):
    text = BASE.replace(*edit)
    if expected is None:  # [matrix] python and [axes] python together: the default would never be used
        text = BASE.replace('checks = ["stack-smoke"]', 'checks = ["stack-smoke"]\npython = "3.11"').replace(
            'device = ["cpu"]', 'device = ["cpu"]\npython = ["3.12"]')
        expected = r"m.toml \(line 4\): matrix.python: unused"
    with pytest.raises(InputError, match=expected) as info:
        load_text(tmp_path, text)
    assert "\n" not in str(info.value)


def test_cli_exits_2_on_a_bad_python_value(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(BASE.replace('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.12; rm -rf"]'))
    done = subprocess.run([sys.executable, "-m", "harness", "matrix", "list", str(path)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "line 11" in done.stderr and "axes.python" in done.stderr


# --- finding the interpreter ------------------------------------------------------------------------

def fake_python(path: Path, version: str | None) -> Path:
    """An executable that answers the version probe like a Python of `version`, or refuses like a
    pyenv shim whose version is not selected (exit 127)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = f'echo "{version}"' if version else 'echo "pyenv: $(basename $0): command not found" >&2; exit 127'
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_own_interpreter_is_found_without_searching():
    own = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = interpreters.find(own, {"PATH": "", "HOME": ""})
    assert found.path == sys.executable and found.version.startswith(own)


def test_python_x_y_on_path_is_found_and_checked_by_running_it(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_python(bin_dir / "python3.97", "3.97.2")
    found = interpreters.find("3.97", {"PATH": str(bin_dir), "HOME": str(tmp_path)})
    assert found == interpreters.Interpreter(str(bin_dir / "python3.97"), "3.97.2")
    with pytest.raises(interpreters.InterpreterMissing, match=r"3\.97\.5"):  # a release it is not
        interpreters.find("3.97.5", {"PATH": str(bin_dir), "HOME": str(tmp_path)})


def test_a_refusing_pyenv_shim_is_passed_over_for_the_pyenv_installation(tmp_path):
    shims, root = tmp_path / "shims", tmp_path / "pyenv"
    fake_python(shims / "python3.96", None)
    fake_python(root / "versions" / "3.96.1" / "bin" / "python3.96", "3.96.1")
    fake_python(root / "versions" / "3.96.4" / "bin" / "python3.96", "3.96.4")
    (root / "versions" / "miniconda3-latest").mkdir()  # not a CPython release: ignored
    environ = {"PATH": str(shims), "PYENV_ROOT": str(root), "HOME": str(tmp_path)}
    assert interpreters.find("3.96", environ).version == "3.96.4"  # the newest matching release
    assert interpreters.find("3.96.1", environ).path == str(root / "versions" / "3.96.1" / "bin" / "python3.96")


def test_a_missing_interpreter_says_which_and_where_the_harness_looked(tmp_path):
    shims, root = tmp_path / "shims", tmp_path / "pyenv"
    fake_python(shims / "python3.95", None)
    (root / "versions" / "3.94.0").mkdir(parents=True)
    with pytest.raises(interpreters.InterpreterMissing) as info:
        interpreters.find("3.95", {"PATH": str(shims), "PYENV_ROOT": str(root), "HOME": str(tmp_path)})
    message = str(info.value)
    assert "Python 3.95 is not on this runner" in message
    assert f"python3.95: {shims / 'python3.95'}" in message and "does not run" in message
    assert str(root / "versions") in message and "has 3.94.0" in message


def test_uv_is_never_allowed_to_download_a_python(tmp_path, monkeypatch):
    """Every uv call of a cell environment (venv, install, sync, freeze) gets UV_PYTHON_DOWNLOADS=never,
    even where the user's environment asks for automatic downloads."""
    record = tmp_path / "uv-calls.jsonl"
    fake_uv = tmp_path / "uv"
    fake_uv.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        with open({str(record)!r}, "a") as out:
            out.write(json.dumps([sys.argv[1:3], os.environ.get("UV_PYTHON_DOWNLOADS")]) + "\\n")
        if sys.argv[1] == "venv":
            python = os.path.join(sys.argv[-1], "bin", "python")
            os.makedirs(os.path.dirname(python), exist_ok=True)
            open(python, "w").close()
        """))
    fake_uv.chmod(0o755)
    monkeypatch.setattr(cellenv, "uv_binary", lambda: str(fake_uv))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "automatic")
    env = cellenv.build("c", ["einops==0.8.2"], tmp_path / "envs", tmp_path / "setup.log", "/some/python3.12")
    cellenv.freeze(env)
    lock = tmp_path / "lock.txt"
    lock.write_text("einops==0.8.2\n")
    cellenv.build_from_lock("r", lock, tmp_path / "envs", tmp_path / "repro.log", "/some/python3.12")
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c[0][:2] for c in calls] == [["venv", "--quiet"], ["pip", "install"], ["pip", "freeze"],
                                         ["venv", "--quiet"], ["pip", "sync"]]
    assert {c[1] for c in calls} == {"never"}
    assert "--python /some/python3.12" in (tmp_path / "setup.log").read_text()


# --- in a run ---------------------------------------------------------------------------------------

def test_repro_rebuilds_on_the_cells_interpreter_and_exits_3_without_it(tmp_path):
    from harness.results.records import CellResult, write_json_atomic

    cell = CellResult("py", "fsdp-text-py3.95", {"backend": "fsdp", "model": "text", "device": "cpu",
                                                 "python": "3.95"}, lock="cells/fsdp-text-py3.95/lock.txt")
    write_json_atomic(tmp_path / "out" / "cells" / "fsdp-text-py3.95.json", cell.to_dict())
    (tmp_path / "out" / cell.lock).parent.mkdir(parents=True)
    (tmp_path / "out" / cell.lock).write_text("packaging==24.2\n")
    done = subprocess.run([sys.executable, "-m", "harness", "repro", cell.cell_id, "--check", "stack-smoke", "--dir",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs")], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "Python 3.95 is not on this runner" in done.stderr
    assert not (tmp_path / "envs").exists()


def test_bisect_cells_keep_the_templates_interpreter(tmp_path):
    from packaging.version import Version

    from harness.rerun.bisect import cell_for

    template = load_text(tmp_path, BASE + INCLUDE_312).cells[1]
    probe = cell_for(template, "transformers", Version("5.9.0"))
    assert probe.id == "megatron-text-tf5.9.0-torch2.13.0-mcore0.19.2-py3.12" and probe.python == "3.12"
