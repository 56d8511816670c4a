"""harness.envs.pipconfig: pip's configuration read the same from every interpreter, one without pip included (an
environment made by uv), so that the harness forwards the machine's find-links and constraints to uv wherever it
runs."""
import subprocess
import sys
from types import SimpleNamespace

from harness.envs import pipconfig


def test_an_interpreter_without_pip_reads_the_machines_pip_configuration(monkeypatch, tmp_path):
    asked = []
    constraints, wheels = str(tmp_path / "constraints.txt"), str(tmp_path / "wheels")

    def run(argv, **kwargs):
        asked.append(argv[0])
        if argv[0] == sys.executable:  # `python -m pip`: no module named pip
            return SimpleNamespace(returncode=1, stdout="", stderr="No module named pip")
        return SimpleNamespace(returncode=0, stderr="",
                               stdout=f"global.constraint='{constraints}'\n:env:.find-links='{wheels}'\n")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(pipconfig.shutil, "which", lambda name: str(tmp_path / "bin" / name))
    pipconfig.pip_config.cache_clear()
    try:
        assert pipconfig.pip_config() == {"constraint": constraints, "find-links": wheels}
        env = pipconfig.uv_environment({})
        assert env == {"UV_FIND_LINKS": wheels, "UV_CONSTRAINT": constraints}
    finally:
        pipconfig.pip_config.cache_clear()
    assert asked == [sys.executable, str(tmp_path / "bin" / "pip3")]
