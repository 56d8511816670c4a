"""vllm-rollout's sleep and wake verdicts on a stand-in engine (no vLLM): they fail on a wake that leaves the
weights undefined (greedy collapse) and on one that crashes, and the reason vLLM gives for having no sleep mode is
read from its code (a stand-in vLLM package). The full cycles (a whole engine passing, a zeroed Gated DeltaNet
state failing) train and generate for a while: tests/e2e/test_sleep_wake_cycles.py."""
from __future__ import annotations

import sys
import textwrap

import pytest
from qwen35_helpers import qwen35_or_skip
from sleep_standin import standin_verdicts

from harness.checks import CheckOptions
from harness.checks.support import vllm_engine
from harness.checks.vllm_rollout import sleep_wake
from harness.results.records import Status

torch = pytest.importorskip("torch")
ENGINE = {"name": "stand-in", "version": "0"}
CYCLES = (1, 2)  # both levels, and a second wake


@pytest.fixture(autouse=True)
def _qwen35():
    qwen35_or_skip()


def _verdicts(monkeypatch, cycle=sleep_wake.default_cycle):
    return standin_verdicts(monkeypatch, cycle=cycle, cycles=CYCLES)


def _no_sync(rollout, state, level):
    """A cycle that wakes without the weight sync: after level 2 the weights are whatever the pages held."""
    rollout.sleep(level)
    rollout.wake_up(["weights"])
    rollout.wake_up(["kv_cache"])


def test_undefined_weights_after_a_wake_collapse_the_greedy_tokens(monkeypatch):
    verdicts = _verdicts(monkeypatch, cycle=_no_sync)
    greedy = verdicts["sleep-greedy"]
    assert greedy.status is Status.FAIL and "cycle 2: greedy tokens collapsed to token 0" in greedy.message, \
        greedy.message
    assert verdicts["sleep-wake"].status is Status.FAIL  # NaN log-probs fail, never pass


def test_a_cycle_that_raises_fails_both_with_its_exception(monkeypatch):
    def crash(rollout, state, level):
        raise AttributeError("'list' object has no attribute 'zero_'")  # vllm #41564's wake

    verdicts = _verdicts(monkeypatch, cycle=crash)
    for verdict in verdicts.values():
        assert verdict.status is Status.FAIL
        assert "cycle 1 (sleep level 1): AttributeError: 'list' object has no attribute 'zero_'" in verdict.message


def test_a_platform_without_sleep_mode_skips_with_vllms_reason(monkeypatch):
    monkeypatch.setattr(vllm_engine, "sleep_mode_refusal", lambda: "vLLM's CpuPlatform has no sleep mode (x.py:1)")
    verdicts = sleep_wake.sleep_wake_verdicts("text", CheckOptions(), ENGINE, start=pytest.fail)
    assert {v.name: v.status for v in verdicts} == {"text/sleep-wake": Status.SKIP, "text/sleep-greedy": Status.SKIP}
    assert all(v.message == "needs an accelerator: vLLM's CpuPlatform has no sleep mode (x.py:1)" for v in verdicts)


def _batch(responses, logprobs):
    from trainers.rollout import RolloutBatch

    ids = torch.tensor(responses)
    return RolloutBatch(ids, torch.ones_like(ids), torch.ones_like(ids), torch.tensor(logprobs), [0] * len(ids), 0)


def test_engines_are_compared_up_to_where_their_tokens_part():
    ours = _batch([[1, 2, 3], [4, 5, 6]], [[-1.0, -1.0, -9.0], [-1.0, -1.0, -1.0]])
    fresh = _batch([[1, 2, 7], [4, 5, 6]], [[-1.0, -1.01, -1.0], [-1.0, -1.0, -1.5]])
    assert sleep_wake.prefix_error(ours, fresh) == pytest.approx(
        {"max_abs_error": 0.5, "compared": 5, "rows_diverged": 1})
    assert sleep_wake.dominant_token(_batch([[0, 0, 0], [0, 0, 3]], [[0.0] * 3] * 2)) == (0, pytest.approx(5 / 6))


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A vLLM whose CPU platform has no sleep mode, laid out as vLLM lays it out."""
    root = tmp_path / "site" / "vllm"
    (root / "platforms").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "__init__.py").write_text("")
    (root / "platforms" / "interface.py").write_text(textwrap.dedent("""\
        class Platform:
            _enum = "cpu"

            def is_sleep_mode_available(self) -> bool:
                # only some accelerators
                return self._enum in ("cuda",)
        """))
    (root / "platforms" / "__init__.py").write_text(textwrap.dedent("""\
        from .interface import Platform

        class CpuPlatform(Platform):
            pass

        current_platform = CpuPlatform()
        """))
    (root / "config" / "__init__.py").write_text(textwrap.dedent("""\
        class ModelConfig:
            def __post_init__(self):
                if not current_platform.is_sleep_mode_available():
                    raise ValueError("Sleep mode is not supported on current platform.")
        """))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    yield root
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


def test_the_refusal_is_read_from_vllms_code(fake_vllm):
    assert vllm_engine.sleep_mode_refusal() == (
        "vLLM's CpuPlatform has no sleep mode: is_sleep_mode_available() is False (vllm/platforms/interface.py:6: "
        "return self._enum in (\"cuda\",)), and the model config refuses enable_sleep_mode there "
        "(vllm/config/__init__.py:3)")


def test_a_platform_with_sleep_mode_gives_no_refusal(fake_vllm):
    (fake_vllm / "platforms" / "interface.py").write_text(
        "class Platform:\n    def is_sleep_mode_available(self):\n        return True\n")
    assert vllm_engine.sleep_mode_refusal() is None
