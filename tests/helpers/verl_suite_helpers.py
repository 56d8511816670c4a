"""A stand-in verl release and its sdist, for the verl-tests check's tests where verl is absent.

`fake_verl(site)` installs `verl 9.9.0` into a folder (its dist-info and a package with a `utils.concat`
helper, declaring tensordict<=0.10.0); `fake_sdist(folder)` writes `verl-9.9.0.tar.gz` holding a `tests/` tree:
passing tests, a test of `verl.utils.concat` (which a conftest the test injects can break), a file needing a
module nobody has, a file importing a name verl lacks, a test reading verl's files by path next to `tests/`,
a folder the selection leaves out and a GPU test it never includes.
"""
from __future__ import annotations

import io
import tarfile
import textwrap
from pathlib import Path

VERSION = "9.9.0"

SUITE = {
    "tests/__init__.py": "",
    "tests/test_math_on_cpu.py": """\
        def test_adds():
            assert 1 + 1 == 2

        def test_multiplies():
            assert 2 * 3 == 6
        """,
    "tests/test_concat_on_cpu.py": """\
        from verl.utils import concat

        def test_concat_keeps_order():
            assert concat([1], [2]) == [1, 2]

        def test_concat_of_empty():
            assert concat([], []) == []
        """,
    "tests/test_needs_missing_on_cpu.py": """\
        import no_such_module_for_verl_tests

        def test_never_collected():
            assert no_such_module_for_verl_tests
        """,
    "tests/utils/__init__.py": "",
    "tests/utils/test_reads_source_on_cpu.py": """\
        from pathlib import Path

        def test_reads_verl_by_path():
            assert "def concat" in (Path(__file__).parents[2] / "verl" / "utils.py").read_text()
        """,
    "tests/single_controller/__init__.py": "",
    "tests/single_controller/test_workers_on_cpu.py": "def test_left_out():\n    assert False\n",
    "tests/test_kernel_on_gpu.py": "def test_never_included():\n    assert False\n",
}
BROKEN_IMPORT = {"tests/test_broken_import_on_cpu.py": "from verl.utils import no_such_name\n"}
# What a conftest injected into the unpacked suite does to verl's helper: a "utility" changed under the tests.
BREAKER = """\
    import verl.utils

    verl.utils.concat = lambda a, b: b + a
    """


def fake_verl(site: Path, version: str = VERSION) -> Path:
    """`site` holding verl `version` (package and dist-info); returns `site`."""
    (site / "verl").mkdir(parents=True)
    (site / "verl" / "__init__.py").write_text("")
    (site / "verl" / "utils.py").write_text("def concat(a, b):\n    return list(a) + list(b)\n")
    info = site / f"verl-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {version}\n"
                                   "Requires-Dist: tensordict<=0.10.0\n")
    (info / "RECORD").write_text("")
    return site


def fake_sdist(folder: Path, files: dict[str, str] | None = None, version: str = VERSION) -> Path:
    """`folder`/verl-VERSION.tar.gz with `files` (default SUITE) under verl-VERSION/, and a copy of verl's own
    package, which the check must never run."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"verl-{version}.tar.gz"
    members = {**(SUITE if files is None else files), "verl/__init__.py": "raise ImportError('the sdist copy')\n",
               "setup.py": ""}
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = textwrap.dedent(text).encode()
            info = tarfile.TarInfo(f"verl-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
