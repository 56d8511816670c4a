"""Finding the interpreter a cell names (harness/envs/interpreters.py): this one without searching, python3.X on
PATH checked by running it, a refusing pyenv shim passed over for pyenv's installation, and a missing one said with
where the harness looked."""
import stat
import sys
from pathlib import Path

import pytest

from harness.envs import interpreters


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
