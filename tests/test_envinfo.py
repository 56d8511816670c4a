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
