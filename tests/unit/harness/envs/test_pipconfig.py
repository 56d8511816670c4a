"""harness.envs.pipconfig: pip's configuration read the same from every interpreter, one without pip included (an
environment made by uv), so that the harness forwards the machine's find-links and constraints to uv wherever it
runs."""
import subprocess
import sys
from types import SimpleNamespace

from harness.envs import pipconfig


def test_an_interpreter_without_pip_reads_the_machines_pip_configuration(monkeypatch):
    asked = []

    def run(argv, **kwargs):
        asked.append(argv[0])
        if argv[0] == sys.executable:  # `python -m pip`: no module named pip
            return SimpleNamespace(returncode=1, stdout="", stderr="No module named pip")
        return SimpleNamespace(returncode=0, stderr="",
                               stdout="global.constraint='/etc/pip/constraints.txt'\n:env:.find-links='/opt/wheels'\n")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(pipconfig.shutil, "which", lambda name: f"/usr/bin/{name}")
    pipconfig.pip_config.cache_clear()
    try:
        assert pipconfig.pip_config() == {"constraint": "/etc/pip/constraints.txt", "find-links": "/opt/wheels"}
        env = pipconfig.uv_environment({})
        assert env == {"UV_FIND_LINKS": "/opt/wheels", "UV_CONSTRAINT": "/etc/pip/constraints.txt"}
    finally:
        pipconfig.pip_config.cache_clear()
    assert asked == [sys.executable, "/usr/bin/pip3"]
