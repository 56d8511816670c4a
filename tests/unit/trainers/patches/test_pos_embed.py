"""The position-embedding device patch: version range, clean apply/remove, stock numerics.

Expectations follow the installed transformers: in 5.2-5.8 the Qwen3.5 patches apply and must
reproduce the stock numbers bit for bit; from 5.9 they report NotApplicable.
"""
from __future__ import annotations

import contextlib
import importlib

import pytest
import torch
from packaging.version import Version

from trainers.models import Qwen35Unavailable, build_model
from trainers.patches.base import NotApplicable, installed_version, resolve, split_target

pytestmark = pytest.mark.versions  # nox -s tests-affected runs these on a buggy transformers
from trainers.patches.pos_embed import METHOD, PATCHES

TRANSFORMERS = installed_version("transformers")
BUGGY = Version("5.2") <= TRANSFORMERS < Version("5.9")  # the stock method reads the weight's device
GRIDS = torch.tensor([[1, 8, 8], [2, 4, 8], [1, 12, 6], [3, 2, 2]])


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _vision_model(patch):
    """A tiny vision tower of the patch's target class, built from its own vision config."""
    owner, _ = resolve(patch.target)
    configs = importlib.import_module(owner.__module__.replace(".modeling_", ".configuration_"))
    config_cls = next(getattr(configs, n) for n in dir(configs) if n.endswith("VisionConfig"))
    config = config_cls(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                        spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16)
    torch.manual_seed(0)
    return owner(config)


def _qwen35(patch) -> bool:
    return ".qwen3_5" in split_target(patch.target)[0]


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_applicability_follows_installed_version(patch):
    applies, reason = patch.applicable()
    if _qwen35(patch):
        assert applies == BUGGY, reason
    if not applies:
        with pytest.raises(NotApplicable):
            patch.apply()
        assert not patch.applied


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_apply_and_remove_restore_the_original_exactly(patch):
    if not patch.applicable()[0]:
        pytest.skip("not applicable here (see test_applicability_follows_installed_version)")
    owner, attr = resolve(patch.target)
    before = owner.__dict__[attr]
    with patch.applied_context():
        assert owner.__dict__[attr] is patch.replacement
        patch.apply()  # applying twice must not stack
    assert owner.__dict__[attr] is before
    assert not patch.applied
    patch.apply()
    patch.remove()
    patch.remove()
    assert owner.__dict__[attr] is before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_patched_equals_stock_bit_for_bit_without_offload(patch, dtype):
    if not patch.applicable()[0]:
        pytest.skip("not applicable here")
    model = _vision_model(patch).to(dtype)
    stock = getattr(model, METHOD)(GRIDS)
    stock.float().square().sum().backward()
    stock_grad = model.pos_embed.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    with patch.applied_context():
        patched = getattr(model, METHOD)(GRIDS)
        patched.float().square().sum().backward()
    assert patched.dtype == stock.dtype and patched.shape == stock.shape
    assert torch.equal(patched, stock)
    assert torch.equal(model.pos_embed.weight.grad, stock_grad)


def test_patched_indices_follow_grid_device_not_weight_device():
    """With the weight on the meta device, the patched method still looks up on grid_thw's device."""
    patch = PATCHES[0]
    if not patch.applicable()[0]:
        pytest.skip("not applicable here")
    model = _vision_model(patch)
    seen = []

    def record(module, args):
        seen.append(args[0].device)

    model.pos_embed.register_forward_pre_hook(record)
    real = model.pos_embed.weight
    model.pos_embed.weight = torch.nn.Parameter(torch.empty_like(real, device="meta"))
    with patch.applied_context(), contextlib.suppress(RuntimeError):
        getattr(model, METHOD)(GRIDS)  # the lookup itself fails on a meta weight; the index device is what counts
    assert seen == [torch.device("cpu")]


def test_version_range_matches_where_the_forward_uses_the_method():
    """The boundary is behavioural: below 5.9 the vision forward calls the method, from 5.9 it does not."""
    try:
        model = build_model("vl")
    except Qwen35Unavailable:
        pytest.skip("no Qwen3.5 in this transformers")
    vision = model.model.visual
    cls = type(vision)
    calls = []
    stock = cls.__dict__.get(METHOD)
    if stock is None:
        assert not BUGGY  # removed upstream: nothing to patch
        pytest.skip(f"transformers {TRANSFORMERS} has no {METHOD}: the buggy-range case runs in nox -s tests-affected")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cls, METHOD, lambda self, grid: calls.append(1) or stock(self, grid))
        config = vision.config
        patch_dim = config.in_channels * config.temporal_patch_size * config.patch_size ** 2
        vision(torch.randn(1 * 8 * 8 + 2 * 4 * 8, patch_dim), grid_thw=torch.tensor([[1, 8, 8], [2, 4, 8]]))
    assert bool(calls) == BUGGY
