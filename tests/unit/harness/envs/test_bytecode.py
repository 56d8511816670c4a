"""Bytecode shared between environments whose RECORD names the same source (envs/bytecode.py)."""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import py_compile
import subprocess
import sys
import zipfile
from pathlib import Path

from wheel_helpers import offline_index, wheel

from harness.envs import bytecode, cellenv

MODULE = "VALUE = 41 + 1\n"


def _sha(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def _environment(root: Path, name: str, text: str = MODULE, recorded: str | None = None) -> Path:
    """A site-packages holding pkg/mod.py with `text`, installed by a distribution whose RECORD names the sha256
    of `recorded` (default: of `text`)."""
    site = root / name / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_text(text)
    (site / "pkg-1.0.dist-info").mkdir()
    digest = _sha(text if recorded is None else recorded)
    (site / "pkg-1.0.dist-info" / "RECORD").write_text(
        f"pkg/mod.py,sha256={digest},{len(text)}\n../../bin/tool,sha256={digest},3\npkg-1.0.dist-info/RECORD,,\n")
    return site


def _compile(site: Path) -> Path:
    return Path(py_compile.compile(str(site / "pkg" / "mod.py"), doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP))


def _import(site: Path) -> str:
    """What a fresh interpreter, free to write bytecode, gets importing pkg.mod from `site`."""
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-c", "import pkg.mod as m; print(m.VALUE)"], capture_output=True,
                          text=True, check=True, env={**environ, "PYTHONPATH": str(site)})
    return done.stdout.strip()


def _cached(site: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(site / "pkg" / "mod.py")))


def test_a_second_environment_gets_the_first_ones_bytecode(tmp_path):
    first, second = _environment(tmp_path, "a"), _environment(tmp_path, "b")
    _compile(first)
    store = tmp_path / "store"

    assert bytecode.keep([first], store) == 1
    assert bytecode.keep([first], store) == 0  # already stored
    assert bytecode.seed([second], store) == 1
    seeded = _cached(second)
    assert seeded.read_bytes()[4:8] == (0b11).to_bytes(4, "little")  # a checked hash-based .pyc
    linked = seeded.stat().st_ino
    assert _import(second) == "42"
    assert seeded.stat().st_ino == linked  # Python found it current: it wrote no other


def test_bytecode_of_a_source_unlike_its_record_is_not_stored(tmp_path):
    first = _environment(tmp_path, "a", recorded="VALUE = 7\n")  # the file is not the one RECORD names
    _compile(first)
    assert bytecode.keep([first], tmp_path / "store") == 0


def test_bytecode_older_than_its_source_is_not_stored(tmp_path):
    first = _environment(tmp_path, "a")
    _compile(first)
    source = first / "pkg" / "mod.py"
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 5 * 10**9))
    assert bytecode.keep([first], tmp_path / "store") == 0


def test_a_source_edited_after_install_is_compiled_again_not_given_the_stored_code(tmp_path):
    first = _environment(tmp_path, "a")
    _compile(first)
    store = tmp_path / "store"
    bytecode.keep([first], store)
    second = _environment(tmp_path, "b", text="VALUE = 7\n", recorded=MODULE)  # edited after its RECORD was written

    assert bytecode.seed([second], store) == 1
    assert _import(second) == "7"  # Python's hash check refused the linked file


def test_only_this_interpreters_bytecode_is_seeded(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / f"{_sha(MODULE)}.other-99.pyc").write_bytes(b"not for this interpreter")
    assert bytecode.seed([_environment(tmp_path, "a")], store) == 0


def test_no_store_yet_seeds_nothing(tmp_path):
    assert bytecode.seed([_environment(tmp_path, "a")], tmp_path / "missing") == 0


def _wheel_with_record(folder: Path) -> Path:
    """A wheel of `sharedmod` whose RECORD names its module's sha256, as released wheels do."""
    text = MODULE.encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(text).digest()).rstrip(b"=").decode()
    info = "sharedmod-1.0.dist-info"
    path = folder / "sharedmod-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sharedmod.py", text)
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: sharedmod\nVersion: 1.0\n")
        archive.writestr(f"{info}/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", f"sharedmod.py,sha256={digest},{len(text)}\n{info}/METADATA,,\n"
                                           f"{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def test_environments_built_by_cellenv_share_what_a_check_compiled(tmp_path, monkeypatch):
    """The path a cell takes: build (seed), a check compiles, the cell keeps; the next cell's build links it."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel_with_record(wheels)
    wheel(wheels, "packaging", "99.0")  # what every cell environment gets (cellenv.HARNESS_NEEDS)
    offline_index(monkeypatch, wheels)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    root = tmp_path / "envs"
    first = cellenv.build("a", ["sharedmod==1.0"], root, tmp_path / "a.log", sys.executable)
    code = "import sharedmod; print(sharedmod.VALUE)"
    subprocess.run([str(first.python), "-c", code], check=True, env=first.run_env(), capture_output=True)
    cellenv.share_bytecode(first, "keep", root)

    second = cellenv.build("b", ["sharedmod==1.0"], root, tmp_path / "b.log", sys.executable)
    seeded = Path(importlib.util.cache_from_source(str(cellenv.site_packages(second)[0] / "sharedmod.py")))
    assert seeded.read_bytes()[4:8] == (0b11).to_bytes(4, "little")
    linked = seeded.stat().st_ino
    done = subprocess.run([str(second.python), "-c", code], check=True, env=second.run_env(), capture_output=True,
                          text=True)
    assert done.stdout.strip() == "42"
    assert seeded.stat().st_ino == linked


def test_a_store_on_another_file_system_is_copied_from(tmp_path, monkeypatch):
    first, second = _environment(tmp_path, "a"), _environment(tmp_path, "b")
    _compile(first)
    store = tmp_path / "store"
    bytecode.keep([first], store)

    def no_link(source, target):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(bytecode.os, "link", no_link)
    assert bytecode.seed([second], store) == 1
    assert _cached(second).read_bytes() == next(store.iterdir()).read_bytes()
    assert _import(second) == "42"
