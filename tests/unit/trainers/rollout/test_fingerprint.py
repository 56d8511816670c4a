"""Fingerprints of the weights an engine holds: exact (a bit, a swap, a dtype change), the same for the engine's
tensors and for a state loaded into it, and read from vLLM's workers through the worker method."""
import types

import pytest
import torch

from trainers.rollout import fingerprint as fp


def test_a_fingerprint_sees_one_bit_a_swap_and_a_dtype():
    weights = torch.linspace(-1, 1, 64)
    base = fp.fingerprint([("w", weights)])
    assert fp.fingerprint([("w", weights.clone())]) == base
    flipped = weights.clone()
    flipped.view(torch.int32)[17] ^= 1  # the last bit of one element
    assert fp.fingerprint([("w", flipped)]) != base
    swapped = weights.clone()
    swapped[[3, 40]] = swapped[[40, 3]]  # same sum, same sum of squares: the position-weighted sum sees it
    assert fp.fingerprint([("w", swapped)]) != base
    assert fp.fingerprint([("w", weights.to(torch.bfloat16))]) != base
    assert fp.fingerprint([("w", weights.reshape(8, 8))]) != base
    assert fp.fingerprint([("v", weights)]) != base
    with pytest.raises(ValueError):
        fp.fingerprint([])


def test_the_final_norm_is_found_under_each_engines_names():
    norm = torch.zeros(4)
    for name in ("model.norm.weight", "model.language_model.norm.weight", "language_model.model.norm.weight"):
        others = [("model.layers.0.input_layernorm.weight", torch.ones(4)), ("model.visual.merger.norm.weight",
                  torch.ones(4)), ("mtp.norm.weight", torch.ones(4)), ("model.layers.1.linear_attn.norm.weight",
                  torch.ones(4))]
        assert fp.final_norm([*others, (name, norm)]) is norm
    with pytest.raises(ValueError, match="none"):
        fp.final_norm([("model.layers.0.input_layernorm.weight", norm)])


def _model():
    from qwen35_helpers import qwen35_or_skip

    qwen35_or_skip()
    from trainers.models import build_model

    return build_model("text", seed=0)


def test_the_hf_engine_reports_what_it_holds_and_what_a_state_would_give():
    from trainers.rollout.hf import HFRollout

    model = _model()
    engine = HFRollout(model)
    start = engine.held_fingerprint()
    assert engine.fingerprint_of(model.state_dict()) == start
    changed = {k: v + 1e-3 if k.endswith("norm.weight") else v for k, v in model.state_dict().items()}
    assert engine.fingerprint_of(changed) != start
    engine.sync_weights(changed)
    assert engine.held_fingerprint() == engine.fingerprint_of(changed)
    # a state in another dtype is read as the engine casts it when it loads it
    assert engine.fingerprint_of({k: v.double() for k, v in changed.items()}) == engine.held_fingerprint()
    with pytest.raises(ValueError, match="lacks 1 of the engine's tensors"):
        engine.fingerprint_of({k: v for k, v in changed.items() if k != "model.norm.weight"})


def test_vllm_workers_report_their_final_norm_and_the_engine_matches_states_against_it():
    from trainers.rollout.vllm import VLLMRollout

    class Worker(fp.WorkerFingerprint):  # vLLM mixes the extension into its worker; the model is its own
        def __init__(self, norm):
            params = {"language_model.model.norm.weight": norm,
                      "language_model.model.layers.0.input_layernorm.weight": torch.zeros(4, dtype=norm.dtype)}
            self.model_runner = types.SimpleNamespace(model=types.SimpleNamespace(named_parameters=params.items))

    state = {"model.language_model.norm.weight": torch.tensor([0.1, -0.2, 0.3, 1e-4]),
             "model.language_model.layers.0.input_layernorm.weight": torch.zeros(4)}
    loaded = state["model.language_model.norm.weight"].to(torch.bfloat16)  # the workers' loader casts
    workers = [Worker(loaded.clone()), Worker(loaded.clone()), types.SimpleNamespace(
        held_weights_fingerprint=lambda: None)]  # a pipeline stage without the norm answers None

    engine = VLLMRollout.__new__(VLLMRollout)
    engine._norm_dtype = None
    engine.llm = types.SimpleNamespace(collective_rpc=lambda method: [getattr(w, method)() for w in workers])
    with pytest.raises(RuntimeError, match="held_fingerprint"):
        engine.fingerprint_of(state)  # the workers' dtype is not known yet
    held = engine.held_fingerprint()
    assert engine._norm_dtype is torch.bfloat16 and engine.fingerprint_of(state) == held
    assert engine.fingerprint_of({**state, "model.language_model.norm.weight": torch.zeros(4)}) != held
    workers[1] = Worker(torch.zeros(4, dtype=torch.bfloat16))  # the workers disagree: no state can match both
    assert "|" in engine.held_fingerprint() and engine.held_fingerprint() != held
