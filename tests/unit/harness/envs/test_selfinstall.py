"""harness.envs.selfinstall: a nox session installs the harness again only when its environment lacks the editable
install or pyproject.toml changed since it was made, and never records an install nox skipped."""
import os

import pytest

from harness.envs import selfinstall


@pytest.fixture
def clone(tmp_path):
    root = tmp_path / "clone"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "qwen35-compat-harness"\ndependencies = ["uv>=0.5"]\n')
    return root


def _install(venv, when=None):
    """What uv's editable install leaves: the path file in site-packages, written now (or at `when`)."""
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    pth = site / f"__editable__.{selfinstall.DISTRIBUTION}-0.1.0.pth"
    pth.write_text("import __editable___finder\n")
    if when is not None:
        os.utime(pth, (when, when))
    return pth


def test_an_environment_with_no_record_is_installed(tmp_path, clone):
    venv = tmp_path / "venv"
    _install(venv)
    assert not selfinstall.is_current(venv, clone)


def test_the_recorded_install_is_current_until_pyproject_changes(tmp_path, clone):
    venv = tmp_path / "venv"
    since = selfinstall.started()
    _install(venv)
    assert selfinstall.record(venv, clone, since)
    assert selfinstall.is_current(venv, clone)
    (clone / "harness.py").write_text("x = 1\n")  # code: read from the clone by the editable install
    assert selfinstall.is_current(venv, clone)
    (clone / "pyproject.toml").write_text('[project]\nname = "qwen35-compat-harness"\ndependencies = ["uv>=0.6"]\n')
    assert not selfinstall.is_current(venv, clone)


def test_an_uninstalled_harness_is_installed_again(tmp_path, clone):
    venv = tmp_path / "venv"
    since = selfinstall.started()
    pth = _install(venv)
    selfinstall.record(venv, clone, since)
    pth.unlink()
    assert not selfinstall.is_current(venv, clone)


def test_another_clone_installs_its_own(tmp_path, clone):
    venv, other = tmp_path / "venv", tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_bytes((clone / "pyproject.toml").read_bytes())
    since = selfinstall.started()
    _install(venv)
    selfinstall.record(venv, clone, since)
    assert not selfinstall.is_current(venv, other)


def test_an_install_nox_skipped_is_not_recorded(tmp_path, clone):
    """`nox -R` reuses the environment and skips installs: the path file is the old one, so nothing is recorded and
    the next plain `nox` installs what pyproject.toml now asks."""
    venv = tmp_path / "venv"
    _install(venv, when=1_000_000.0)  # an install made long ago
    assert not selfinstall.record(venv, clone, selfinstall.started())
    assert not selfinstall.is_current(venv, clone)
