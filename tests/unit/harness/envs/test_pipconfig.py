"""harness.envs.pipconfig: pip's configuration read the same from every interpreter, one without pip included (an
environment made by uv), so that the harness forwards the machine's find-links and constraints to uv wherever it
runs; pip's answer kept between runs until a file it reads, or a variable, changes."""
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from harness.envs import pipconfig


@pytest.fixture
def fake_pip(monkeypatch, tmp_path):
    """A machine whose pip3 (not this interpreter's, which has none) reads one user file; what was asked is kept."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    user_file = tmp_path / "pip.conf"
    user_file.write_text("[global]\n")
    constraints, wheels = str(tmp_path / "constraints.txt"), str(tmp_path / "wheels")
    asked = []

    def run(argv, **kwargs):
        asked.append((argv[0], argv[-1]))
        if argv[0] == sys.executable:  # `python -m pip`: no module named pip
            return SimpleNamespace(returncode=1, stdout="", stderr="No module named pip")
        if argv[-1] == "debug":
            return SimpleNamespace(returncode=0, stderr="", stdout=(
                f"env_var:\n  PIP_FIND_LINKS='{wheels}'\nenv:\nglobal:\n  {tmp_path / 'etc.conf'}, exists: False\n"
                f"user:\n  {user_file}, exists: True\n    global.constraint: {constraints}\n"))
        return SimpleNamespace(returncode=0, stderr="",
                               stdout=f"global.constraint='{constraints}'\n:env:.find-links='{wheels}'\n")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(pipconfig.shutil, "which", lambda name: str(tmp_path / "bin" / name))
    monkeypatch.setattr(pipconfig.indexcache, "uv_setting", lambda *args: {})  # test_indexcache.py's
    pipconfig.pip_config.cache_clear()
    yield SimpleNamespace(asked=asked, user_file=user_file, constraints=constraints, wheels=wheels, tmp=tmp_path)
    pipconfig.pip_config.cache_clear()


def test_an_interpreter_without_pip_reads_the_machines_pip_configuration(fake_pip):
    assert pipconfig.pip_config() == {"constraint": fake_pip.constraints, "find-links": fake_pip.wheels}
    env = pipconfig.uv_environment({})
    assert env == {"UV_FIND_LINKS": fake_pip.wheels, "UV_CONSTRAINT": fake_pip.constraints}
    pip3 = str(fake_pip.tmp / "bin" / "pip3")
    assert fake_pip.asked == [(sys.executable, "list"), (pip3, "list"), (pip3, "debug")]


def test_the_answer_is_kept_between_runs_until_a_file_pip_reads_changes(fake_pip):
    first = pipconfig.pip_config()
    pipconfig.pip_config.cache_clear()  # as a new process would start
    fake_pip.asked.clear()
    assert pipconfig.pip_config() == first
    assert fake_pip.asked == []  # pip was not started again

    fake_pip.user_file.write_text("[global]\nconstraint = /elsewhere\n")  # pip's user file edited
    pipconfig.pip_config.cache_clear()
    pipconfig.pip_config()
    assert (str(fake_pip.tmp / "bin" / "pip3"), "list") in fake_pip.asked


def test_a_file_pip_reads_appearing_or_a_pip_variable_asks_again(fake_pip, monkeypatch):
    pipconfig.pip_config()
    (fake_pip.tmp / "etc.conf").write_text("[global]\n")  # listed by pip as absent, now there
    pipconfig.pip_config.cache_clear()
    fake_pip.asked.clear()
    pipconfig.pip_config()
    assert fake_pip.asked  # asked again

    pipconfig.pip_config.cache_clear()
    fake_pip.asked.clear()
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    pipconfig.pip_config()
    assert fake_pip.asked


def test_a_pip_that_does_not_say_which_files_it_reads_is_asked_every_time(fake_pip, monkeypatch):
    plain = subprocess.run

    def no_debug(argv, **kwargs):
        done = plain(argv, **kwargs)
        return SimpleNamespace(returncode=2, stdout="", stderr="unknown command") if argv[-1] == "debug" else done

    monkeypatch.setattr(subprocess, "run", no_debug)
    assert pipconfig.pip_config()["find-links"] == fake_pip.wheels
    assert not list((fake_pip.tmp / "cache").glob(f"**/{pipconfig.CACHE_NAME}*"))


def test_the_machines_real_pip_says_which_files_it_reads_and_is_then_not_asked_again(monkeypatch, tmp_path):
    """Against the real pip's `config debug` output: a format pip changed would leave the answer uncached."""
    if not any(pipconfig.shutil.which(name) for name in ("pip3", "pip")):
        pytest.skip("no pip on this machine")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pipconfig.pip_config.cache_clear()
    try:
        first = pipconfig.pip_config()
        kept = list(tmp_path.glob(f"qwen35-harness/{pipconfig.CACHE_NAME}-*.json"))
        assert len(kept) == 1 and json.loads(kept[0].read_text())["files"]  # pip named the files it reads

        def no_pip(*args, **kwargs):
            raise AssertionError("pip was started again")

        monkeypatch.setattr(subprocess, "run", no_pip)
        pipconfig.pip_config.cache_clear()
        assert pipconfig.pip_config() == first
    finally:
        pipconfig.pip_config.cache_clear()


def test_asking_pip_forgets_the_answers_kept_for_interpreters_that_are_gone(fake_pip):
    """One answer is kept per interpreter; every fresh clone's sessions are new interpreters. When pip is asked,
    the answers of interpreters that no longer exist (and of the older files that named none) are removed."""
    folder = pipconfig.cache_folder()
    folder.mkdir(parents=True)
    alive = fake_pip.tmp / "bin" / "python-alive"
    alive.parent.mkdir(exist_ok=True)
    alive.write_text("")
    files = {"gone": {"interpreter": str(fake_pip.tmp / "deleted-clone" / "bin" / "python")},
             "alive": {"interpreter": str(alive)}, "unnamed": {"key": "k"}}
    for name, data in files.items():
        (folder / f"{pipconfig.CACHE_NAME}-{name}.json").write_text(json.dumps(data))
    (folder / f"{pipconfig.CACHE_NAME}-broken.json").write_text("{")  # not readable as ours: left alone
    (folder / "bookworm-py311-1.tar").write_text("")  # the folder's other caches are not touched
    pipconfig.pip_config()
    left = sorted(p.name for p in folder.iterdir())
    own = pipconfig._cache_file().name
    assert left == sorted(["bookworm-py311-1.tar", f"{pipconfig.CACHE_NAME}-alive.json",
                           f"{pipconfig.CACHE_NAME}-broken.json", own])
    assert json.loads(pipconfig._cache_file().read_text())["interpreter"] == sys.executable


def test_another_package_installed_beside_keeps_the_answer_and_pip_installed_asks_again(fake_pip, monkeypatch):
    """nox installs the harness (editable) into its session before every run, which changes the site folder: that
    must not ask pip again. pip itself appearing in this interpreter must, as `python -m pip` is asked first."""
    site = fake_pip.tmp / "site"
    site.mkdir()
    monkeypatch.setattr(pipconfig.sysconfig, "get_paths", lambda: {"purelib": str(site)})
    pipconfig.pip_config()
    (site / "__editable__.other-0.1.pth").write_text("")  # another install: the folder's times change
    pipconfig.pip_config.cache_clear()
    fake_pip.asked.clear()
    pipconfig.pip_config()
    assert fake_pip.asked == []

    (site / "pip").mkdir()  # pip installed here
    pipconfig.pip_config.cache_clear()
    pipconfig.pip_config()
    assert (sys.executable, "list") in fake_pip.asked
