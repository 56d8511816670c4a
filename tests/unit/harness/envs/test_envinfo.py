"""The environment capture records versions and devices, and never a secret."""
import json
import os
import subprocess
import sys

from harness.envs import envinfo


def test_secrets_are_never_recorded():
    environ = {"HF_TOKEN": "hf_secret", "CUDA_VISIBLE_DEVICES": "0", "AWS_SECRET_ACCESS_KEY": "s",
               "OMP_NUM_THREADS": "1"}
    safe = envinfo.safe_environment(environ)
    assert safe == {"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "1"}


def test_capture_in_a_child_process_has_the_essentials_and_no_secret(tmp_path):
    env = {**os.environ, "HF_TOKEN": "hf_do_not_leak", "GITHUB_TOKEN": "ghp_do_not_leak"}
    done = subprocess.run([sys.executable, "-m", "harness", "envinfo"], capture_output=True, text=True, env=env,
                          check=True)
    data = json.loads(done.stdout)
    for key in ("python", "os", "cpu", "packages", "torch", "machine"):
        assert key in data
    assert "do_not_leak" not in done.stdout


def test_torch_build_is_read_from_the_installed_torch_without_importing_it():
    import torch

    assert envinfo.torch_build() == {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": []}


def test_torch_build_is_none_when_version_py_is_missing_or_not_as_generated(tmp_path):
    assert envinfo.torch_build(tmp_path) is None
    (tmp_path / "version.py").write_text("__version__ = compute()\n")
    assert envinfo.torch_build(tmp_path) is None
    (tmp_path / "version.py").write_text("__version__ = '9.9.9+cu999'\ncuda: Optional[str] = '99.9'\n")
    assert envinfo.torch_build(tmp_path) == {"torch": "9.9.9+cu999", "cuda": "99.9", "devices": []}


PROBE = """
import json, sys
from harness.envs import envinfo
envinfo.accelerator_nodes = lambda: {nodes!r}
info = envinfo.capture()
print(json.dumps({{"imported": "torch" in sys.modules, "torch": info["torch"], "devices": info["devices"]}}))
"""


def _capture_with(nodes: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE.format(nodes=nodes)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def test_capture_asks_torch_only_on_a_host_with_accelerator_nodes(monkeypatch):
    import torch

    cpu_host = _capture_with([])  # a fresh interpreter: whether it imports torch can be seen
    assert cpu_host == {"imported": False, "torch": torch.__version__, "devices": []}
    # A host with accelerator nodes, here: torch (imported already) is asked which devices it sees.
    asked = []
    monkeypatch.setattr(envinfo, "accelerator_nodes", lambda: ["/dev/nvidia0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append("is_available") or False)
    accelerator_host = envinfo.capture()
    assert asked == ["is_available"] and accelerator_host["torch"] == torch.__version__
    assert accelerator_host["devices"] == []
