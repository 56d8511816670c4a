"""How the vLLM engines are sized: the checks' own engines by an engine argument, a trainer's by the variable its
users set. vLLM's CPU platform lets the variable win over the argument, so a check that set it would lose its
64 MiB; a trainer left without it would reserve 30% of the machine's memory."""
import os

from harness.checks.grpo_convergence import launch
from harness.checks.support import vllm_engine


def test_the_checks_engines_take_their_kv_size_as_an_argument_not_the_variable(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # restored afterwards: prepare_environment sets what is unset
    assert vllm_engine.ENGINE_ARGS["kv_cache_memory_bytes"] == 64 << 20
    vllm_engine.prepare_environment()
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ  # else vLLM would size the engine at 1 GiB after all


def test_a_trainers_engine_is_sized_by_the_variable():
    assert launch.TRAINER_ENV["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert launch.TRAINER_ENV["OMP_NUM_THREADS"] == "1"
