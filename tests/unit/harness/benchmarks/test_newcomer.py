"""harness.benchmarks.newcomer: the README's first command as a newcomer runs it: a fresh clone, a bare Python,
every cache empty and in the work folder, nothing of the bench's own session; a failed step ends the run and
says which."""
import os
from pathlib import Path

from harness.benchmarks import newcomer


def test_the_newcomers_shell_has_no_virtual_environment_and_empty_caches_of_its_own(tmp_path):
    venv = tmp_path / "bench-venv"
    environ = {"VIRTUAL_ENV": str(venv), "PATH": os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin"]),
               "UV_CACHE_DIR": "/somewhere/warm", "UV_FIND_LINKS": "/opt/wheels", "XDG_CACHE_HOME": "/warm",
               "HOME": "/root", "PIP_INDEX_URL": "https://mirror.example/simple", "PYTHONPATH": "/project"}
    env = newcomer.newcomer_environment(environ, tmp_path / "work")
    assert "VIRTUAL_ENV" not in env and "UV_FIND_LINKS" not in env and "PYTHONPATH" not in env
    assert env["PATH"].split(os.pathsep) == ["/usr/local/bin", "/usr/bin"]
    assert env["UV_CACHE_DIR"] == str(tmp_path / "work" / "uv-cache")
    assert env["XDG_CACHE_HOME"] == str(tmp_path / "work" / "cache")
    assert env["UV_PYTHON_INSTALL_DIR"].startswith(str(tmp_path / "work"))
    # the machine's own settings stay: a newcomer's pip reads them too
    assert env["HOME"] == "/root" and env["PIP_INDEX_URL"] == "https://mirror.example/simple"


def _fake_steps(monkeypatch, fail=None):
    ran = []

    def step(argv, cwd, env, log):
        ran.append((argv, Path(cwd), env))
        return (3 if fail and fail in " ".join(argv) else 0), 1.5

    monkeypatch.setattr(newcomer, "_step", step)
    monkeypatch.setattr(newcomer, "machine_python", lambda env: "/usr/bin/python3")
    return ran


def test_the_readme_command_runs_in_a_fresh_clone_then_a_second_nox(tmp_path, monkeypatch):
    ran = _fake_steps(monkeypatch)
    figures = newcomer.run(tmp_path / "work", root=tmp_path / "project", environ={"PATH": "/usr/bin"})
    commands = [argv for argv, _, _ in ran]
    bare = tmp_path / "work" / "python" / "bin"
    assert commands == [["git", "clone", "-q", str(tmp_path / "project"), str(tmp_path / "work" / "clone")],
                        ["/usr/bin/python3", "-m", "venv", str(tmp_path / "work" / "python")],
                        [str(bare / "python"), "-m", "pip", "install", "-q", "nox[uv]"],
                        [str(bare / "nox")], [str(bare / "nox")]]
    assert all(cwd == tmp_path / "work" / "clone" for _, cwd, _ in ran[2:])
    assert ran[-1][2]["PATH"].split(os.pathsep)[0] == str(bare)  # the newcomer's nox, from the new environment
    assert figures["wall_s"] == 3.0 and figures["nox_s"] == 1.5 and figures["second_nox_s"] == 1.5
    assert figures["exit_status"] == 0 and figures["second_exit_status"] == 0 and "log_tail" not in figures
    assert figures["not_fresh"] == list(newcomer.NOT_FRESH) and figures["cells_run"] == 0
    assert "error" not in figures and "a second nox 1.5 s" in newcomer.describe(figures)


def test_a_failed_install_ends_the_run_and_says_which_step(tmp_path, monkeypatch):
    ran = _fake_steps(monkeypatch, fail="pip install")
    figures = newcomer.run(tmp_path / "work", root=tmp_path / "project", environ={"PATH": "/usr/bin"})
    assert figures["error"] == "pip install exited 3" and "wall_s" not in figures
    assert not any(argv[0].endswith("nox") for argv, _, _ in ran)
    assert newcomer.describe(figures) == "newcomer: pip install exited 3"


def test_a_failing_nox_is_timed_and_keeps_its_log(tmp_path, monkeypatch):
    _fake_steps(monkeypatch, fail="/nox")
    figures = newcomer.run(tmp_path / "work", root=tmp_path / "project", environ={"PATH": "/usr/bin"})
    assert figures["exit_status"] == 3 and figures["second_exit_status"] == 3 and "log_tail" in figures
