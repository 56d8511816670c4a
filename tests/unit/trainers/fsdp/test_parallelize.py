"""trainers.fsdp.parallelize: which modules become FSDP2 units for the text, vl and MoE models,
gradient checkpointing, the error for a model that names no blocks, the one-rank sharding decision, and the
float32 units of the bf16 policy (the Gated DeltaNet mixers, whose A_log and dt_bias must not be rounded).

Runs in this process on a one-rank gloo group with `shard="always"`, so fully_shard really wraps
the modules (one rank is otherwise left unsharded). The expected unit names are written out
here from the models' structure, not computed with the code under test."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch import nn
from torch.distributed.fsdp import FSDPModule

from trainers.fsdp.parallelize import parallelize, should_shard
from trainers.models import Qwen35Unavailable, build_model
from trainers.runtime.device import DevicePlan
from trainers.runtime.device import plan as device_plan

LAYERS = range(4)  # the zoo's models have 4 decoder layers (and 2 vision blocks)

EXPECTED_UNITS = {
    "text": {"", "model.embed_tokens", *(f"model.layers.{i}" for i in LAYERS)},
    "moe": {"", "model.embed_tokens", *(f"model.layers.{i}" for i in LAYERS)},
    "vl": {"", "model.visual.pos_embed", "model.visual.blocks.0", "model.visual.blocks.1",
           "model.language_model.embed_tokens", *(f"model.language_model.layers.{i}" for i in LAYERS)},
}
# Under the bf16 policy, the linear-attention mixers of layers 0-2 (layer 3 is full attention) are units too.
MIXERS = {"text": {f"model.layers.{i}.linear_attn" for i in range(3)},
          "moe": {f"model.layers.{i}.linear_attn" for i in range(3)},
          "vl": {f"model.language_model.layers.{i}.linear_attn" for i in range(3)}}
MIXED = DevicePlan("cpu", "gloo", pin_memory=False, mixed_precision=True)  # the accelerators' policy, on CPU


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    torch.set_num_threads(1)
    if dist.is_initialized():  # another test left a group: ours would collide with it
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model(kind: str, **override):
    try:
        return build_model(kind, override=override or None, seed=0)
    except Qwen35Unavailable as exc:
        pytest.skip(str(exc))


def _units(model: nn.Module) -> set[str]:
    return {name for name, module in model.named_modules() if isinstance(module, FSDPModule)}


def _shard(model, **kwargs):
    return parallelize(model, device_plan("cpu"), world_size=1, shard="always", **kwargs)


@pytest.mark.parametrize("kind", sorted(EXPECTED_UNITS))
def test_units_are_blocks_untied_embeddings_and_the_root(kind):
    model = _model(kind)
    assert model.config.get_text_config().tie_word_embeddings is False  # the zoo unties them
    assert _shard(model) is model  # sharded in place
    assert _units(model) == EXPECTED_UNITS[kind]
    # the output head is not an embedding: its parameters belong to the root unit
    assert not isinstance(model.lm_head, FSDPModule)


def test_tied_embeddings_get_no_unit_of_their_own():
    model = _model("text", tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # really tied
    _shard(model)
    assert _units(model) == EXPECTED_UNITS["text"] - {"model.embed_tokens"}


def test_one_rank_stays_unsharded_unless_asked():
    model = parallelize(_model("text"), device_plan("cpu"), world_size=1, shard="auto")
    assert _units(model) == set()


def _grads_after_step(gradient_checkpointing: bool):
    """Gradients of one forward/backward and how often decoder layer 0's MLP started its forward.
    A child of the layer, since transformers 5.23 checkpoints `forward`, not `__call__` (the layer's
    own hooks stay outside the checkpoint); a pre-hook, since the recomputation stops early once
    the saved tensors backward needs exist, before the MLP's forward returns."""
    model = _model("text")
    model.train()  # transformers only checkpoints in training mode
    _shard(model, gradient_checkpointing=gradient_checkpointing)
    calls = []
    model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.append(1))
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    # With one rank every gradient is a DTensor holding the full gradient.
    grads = {name: p.grad.full_tensor() for name, p in model.named_parameters()}
    return model, grads, len(calls)


def _checkpointing(model) -> bool:
    # transformers 5.23 renamed the property (the old name warns); 5.2 has only the old one.
    name = "is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing") else \
        "is_gradient_checkpointing"
    return bool(getattr(model, name))


def test_gradient_checkpointing_is_enabled_and_keeps_the_gradients():
    plain, plain_grads, plain_calls = _grads_after_step(False)
    checked, checked_grads, checked_calls = _grads_after_step(True)
    assert (_checkpointing(plain), _checkpointing(checked)) == (False, True)
    assert all(layer.gradient_checkpointing for layer in checked.model.layers)
    # Checkpointing recomputes the layer during backward: its MLP runs twice.
    assert (plain_calls, checked_calls) == (1, 2)
    assert plain_grads.keys() == checked_grads.keys() and len(plain_grads) > 10
    for name, grad in plain_grads.items():
        assert grad.abs().sum() > 0 or "bias" in name, f"{name}: no gradient"
        torch.testing.assert_close(checked_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_a_model_without_no_split_modules_is_a_clear_error():
    class Bare(nn.Module):  # no `_no_split_modules`: nothing says which modules are blocks
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

    with pytest.raises(ValueError, match="Bare declares no _no_split_modules"):
        _shard(Bare())
    blocks = _model("text")
    blocks._no_split_modules = []  # declared but empty is the same error
    with pytest.raises(ValueError, match="_no_split_modules"):
        _shard(blocks)


@pytest.mark.parametrize("world, offload, policy, expected", [
    (1, False, "auto", False), (1, True, "auto", True), (2, False, "auto", True), (1, False, "always", True)])
def test_one_rank_without_offload_is_not_sharded_unless_asked(world, offload, policy, expected):
    assert should_shard(world, offload, policy) is expected


def test_unknown_shard_policy_is_an_error():
    with pytest.raises(ValueError, match="shard policy"):
        should_shard(1, False, "sometimes")


def _dtypes_in_forward(model, names: dict[str, str]) -> dict[str, torch.dtype]:
    """The dtype of each named parameter at the start of its owner's forward (after FSDP2 gathered it), and of
    each mixer's output; `names` maps a label to a parameter's qualified name."""
    seen: dict[str, torch.dtype] = {}

    def record(label: str, dtype: torch.dtype) -> None:  # a hook that returns a value would replace the inputs
        seen.setdefault(label, dtype)

    for label, name in names.items():
        owner, _, param = name.rpartition(".")
        module = model.get_submodule(owner)
        module.register_forward_pre_hook(lambda m, _, label=label, param=param: record(label, getattr(m, param).dtype))
        if label == "A_log":
            module.register_forward_hook(lambda m, _, out: record("mixer output", out.dtype))
    return seen


@pytest.mark.parametrize("kind", sorted(EXPECTED_UNITS))
def test_the_bf16_policy_keeps_the_gated_deltanet_mixers_in_float32(kind):
    model = _model(kind)
    parallelize(model, MIXED, world_size=1, shard="always")
    assert _units(model) == EXPECTED_UNITS[kind] | MIXERS[kind]
    # stored (what the optimizer steps on) as built, in float32 (read before a forward: the root stays gathered)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    layers = "model.language_model.layers" if kind == "vl" else "model.layers"
    seen = _dtypes_in_forward(model, {"A_log": f"{layers}.0.linear_attn.A_log",
                                      "dt_bias": f"{layers}.0.linear_attn.dt_bias",
                                      "full attention": f"{layers}.3.self_attn.q_proj.weight",
                                      "mlp": f"{layers}.0.mlp.gate_proj.weight" if kind != "moe" else
                                      f"{layers}.0.mlp.shared_expert.gate_proj.weight"})
    ids = torch.randint(3, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, use_cache=False)
    assert seen == {"A_log": torch.float32, "dt_bias": torch.float32, "mixer output": torch.bfloat16,
                    "full attention": torch.bfloat16, "mlp": torch.bfloat16}


def test_the_cpu_plan_keeps_no_float32_units():
    model = _model("text")
    _shard(model)  # the CPU plan trains in float32: no mixed precision, no extra units
    assert _units(model) == EXPECTED_UNITS["text"]


@pytest.mark.parametrize("gradient_checkpointing", [False, True])
def test_float32_mixers_train_under_the_bf16_policy(gradient_checkpointing):
    model = _model("text")
    model.train()
    reference = {name: p.detach().clone() for name, p in model.named_parameters()}
    parallelize(model, MIXED, world_size=1, shard="always", gradient_checkpointing=gradient_checkpointing)
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    grads = {name: p.grad.full_tensor() for name, p in model.named_parameters()}
    assert grads.keys() == reference.keys()
    for name, grad in grads.items():
        assert grad.dtype == torch.float32 and bool(torch.isfinite(grad).all()), name
    gates = [f"model.layers.{i}.linear_attn.{gate}" for i in range(3) for gate in ("A_log", "dt_bias")]
    assert all(grads[name].abs().sum() > 0 for name in gates)
