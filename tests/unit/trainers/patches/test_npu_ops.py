"""NPU op patches: on and off, patched against stock through the op table, and a broken table failing."""
from __future__ import annotations

import dataclasses
import zipfile

import pytest
import torch

from harness.results.records import Status
from trainers.patches import all_patches, base
from trainers.patches import npu_op_table as table
from trainers.patches.npu_ops import PATCHES, op_parity_verdicts
from trainers.runtime.device import set_cpu_threads

pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5", reason="Qwen3.5 needs transformers >= 5.2")
set_cpu_threads()


def _by_name(verdicts):
    return {v.name.removeprefix("npu-parity:").rsplit(":", 1)[0]: v for v in verdicts}


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_apply_and_remove_restore_the_target(patch):
    owner, attr = base.resolve(patch.target)
    stock = owner.__dict__[attr]
    patch.apply()
    try:
        assert owner.__dict__[attr] is patch.replacement
    finally:
        patch.remove()
    assert owner.__dict__[attr] is stock
    assert not patch.applied


def test_npu_patches_are_in_the_patch_set_and_cover_both_families():
    names = {p.name for p in all_patches()}
    assert {p.name for p in PATCHES} <= names
    assert {p.target.rsplit(":", 1)[1] for p in PATCHES} == {
        "Qwen3_5RMSNorm.forward", "Qwen3_5RMSNormGated.forward", "apply_rotary_pos_emb", "Qwen3_5MLP.forward",
        "Qwen3_5MoeRMSNorm.forward", "Qwen3_5MoeRMSNormGated.forward", "Qwen3_5MoeMLP.forward"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patched_matches_stock_within_tolerance(dtype):
    verdicts = op_parity_verdicts(dtype)
    assert len({v.name for v in verdicts}) == len(PATCHES)
    assert all(v.name.endswith(str(dtype).removeprefix("torch.")) for v in verdicts)
    for verdict in verdicts:
        assert verdict.status is Status.PASS, (verdict.name, verdict.message)
        assert verdict.emulated  # no Ascend here: the fused ops are CPU emulations
        assert verdict.metrics["op_dispatches"] >= 1  # the patched path really ran
        tol = table.TOLERANCES[dtype]
        assert verdict.metrics["max_abs_err"] <= tol.atol + tol.rtol * 10
    assert not any(p.applied for p in PATCHES)  # the check leaves stock code in place


def test_patched_tiny_models_give_stock_logits():
    from trainers.models import build_model

    for kind in ("text", "moe"):
        model = build_model(kind, seed=1).eval()
        with torch.no_grad():
            for module in model.modules():  # RMSNorm weights start at zero: make "1 +" matter
                if type(module).__name__.endswith("RMSNorm"):
                    module.weight.normal_(0.0, 0.1)
        ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            stock = model(input_ids=ids).logits
        before = dict(table.CALLS)
        family = [p for p in PATCHES if ("moe" in p.name) == (kind == "moe")]
        for patch in family:
            patch.apply()
        try:
            with torch.no_grad():
                patched = model(input_ids=ids).logits
        finally:
            for patch in family:
                patch.remove()
        assert all(table.CALLS[op] > before.get(op, 0) for op in table.OP_TABLE), kind
        torch.testing.assert_close(patched, stock, atol=1e-5, rtol=1e-5)


def _scaled(fn, factor):
    return lambda *args, **kwargs: fn(*args, **kwargs) * factor


@pytest.mark.parametrize("op", sorted(table.OP_TABLE))
def test_wrong_op_table_entry_fails_its_patches(monkeypatch, op):
    entry = table.OP_TABLE[op]
    monkeypatch.setitem(table.OP_TABLE, op, dataclasses.replace(entry, emulation=_scaled(entry.emulation, 1.01)))
    verdicts = _by_name(op_parity_verdicts(torch.float32))
    for name, verdict in verdicts.items():
        expected = Status.FAIL if verdict.metrics["op"] == op else Status.PASS
        assert verdict.status is expected, (name, verdict.message)
    failed = [v for v in verdicts.values() if v.status is Status.FAIL]
    assert len(failed) == 2 and all("differs" in v.message for v in failed)


def test_lost_one_plus_weight_scaling_fails():
    # The classic Qwen3.5 RMSNorm mistake: scaling by weight instead of (1 + weight).
    def rms_norm_without_offset(x, gamma, eps):
        return table.OP_TABLE["rms_norm"].reference(x, gamma - 1.0, eps)

    entry = table.OP_TABLE["rms_norm"]
    table.OP_TABLE["rms_norm"] = dataclasses.replace(entry, emulation=rms_norm_without_offset)
    try:
        verdict = _by_name(op_parity_verdicts(torch.bfloat16))["npu-rms-norm[qwen3_5]"]
    finally:
        table.OP_TABLE["rms_norm"] = entry
    assert verdict.status is Status.FAIL
    assert verdict.metrics["max_rel_err"] > 0.5


def test_wrong_reference_fails_the_op_level_comparison(monkeypatch):
    entry = table.OP_TABLE["swiglu"]
    monkeypatch.setitem(table.OP_TABLE, "swiglu", dataclasses.replace(
        entry, reference=lambda x, dim=-1: torch.nn.functional.gelu(x.chunk(2, dim)[0]) * x.chunk(2, dim)[1]))
    verdict = _by_name(op_parity_verdicts())["npu-mlp-swiglu[qwen3_5]"]
    assert verdict.status is Status.FAIL and "torch reference" in verdict.message
    assert verdict.metrics["max_abs_err"] < 1e-5  # the module-level comparison alone still agrees


def test_patch_the_modeling_code_never_calls_fails(monkeypatch):
    # As if a release called another function than the one patched: nothing dispatches.
    from trainers.patches import npu_ops

    rotary = next(p for p in PATCHES if p.name == "npu-rotary[qwen3_5]")
    unused = dataclasses.replace(rotary, _saved=[], target=rotary.target.replace(
        ":apply_rotary_pos_emb", ":apply_rotary_pos_emb_vision"))
    monkeypatch.setattr(npu_ops, "PATCHES", [unused])
    (verdict,) = op_parity_verdicts()
    assert verdict.status is Status.FAIL and "never ran" in verdict.message
    assert verdict.metrics["op_dispatches"] == 0


def test_renamed_target_fails_and_names_it(monkeypatch):
    from trainers.patches import npu_ops

    norm = PATCHES[0]
    renamed = dataclasses.replace(norm, target=norm.target.replace("RMSNorm.forward", "RMSNormV2.forward"), _saved=[])
    monkeypatch.setattr(npu_ops, "PATCHES", [renamed])
    (verdict,) = op_parity_verdicts()
    assert verdict.status is Status.FAIL and "RMSNormV2" in verdict.message


def test_patch_that_breaks_the_forward_fails_without_stopping_the_others(monkeypatch):
    from trainers.patches import npu_ops

    rotary = next(p for p in PATCHES if p.name == "npu-rotary[qwen3_5]")
    shadowing = dataclasses.replace(rotary, _saved=[], target=rotary.target.replace(":apply_rotary_pos_emb",
                                                                                    ":rotate_half"))
    monkeypatch.setattr(npu_ops, "PATCHES", [shadowing, PATCHES[0]])
    broken, fine = op_parity_verdicts()
    assert broken.status is Status.FAIL and "raised TypeError" in broken.message
    assert fine.status is Status.PASS


def test_version_outside_the_range_is_a_skip(monkeypatch):
    from packaging.specifiers import SpecifierSet

    from trainers.patches import npu_ops

    monkeypatch.setattr(npu_ops, "PATCHES", [dataclasses.replace(PATCHES[0], versions=SpecifierSet("<5.2"), _saved=[])])
    (verdict,) = op_parity_verdicts()
    assert verdict.status is Status.SKIP and "not applicable" in verdict.message


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError):
        op_parity_verdicts(torch.float64)


def test_emulations_keep_the_fused_ops_contracts():
    x = torch.randn(2, 3, 8)
    with pytest.raises(TypeError):  # npu_rms_norm wants gamma in the input's dtype
        table.OP_TABLE["rms_norm"].emulation(x.bfloat16(), torch.ones(8), 1e-6)
    with pytest.raises(ValueError):  # npu_rotary_mul takes 4-D tensors
        table.OP_TABLE["rotary_mul"].emulation(x, x, x)
    a, b = torch.randn(4, 5), torch.randn(4, 5)  # swiglu: silu(first half) * second half
    torch.testing.assert_close(table.OP_TABLE["swiglu"].emulation(torch.cat([a, b], -1)),
                               torch.nn.functional.silu(a) * b)
    assert not table.on_npu()


def test_npu_symbol_targets_and_a_static_check_of_a_wheel(tmp_path):
    targets = table.npu_symbol_targets()
    assert targets == ["torch_npu:npu_rms_norm", "torch_npu:npu_rotary_mul", "torch_npu:npu_swiglu"]
    wheel = tmp_path / "torch_npu-0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:  # a release that lost npu_swiglu
        archive.writestr("torch_npu/utils/exposed_api.py",
                         "public_npu_functions = ['npu_rms_norm', 'npu_rotary_mul']\n")
    assert table.missing_npu_symbols(wheel) == ["torch_npu:npu_swiglu"]
    unpacked = tmp_path / "site" / "torch_npu" / "utils"
    unpacked.mkdir(parents=True)
    (unpacked / "exposed_api.py").write_text(f"public_npu_functions = {[t.split(':')[1] for t in targets]!r}\n")
    assert table.missing_npu_symbols(tmp_path / "site") == []
    with pytest.raises(FileNotFoundError):
        table.torch_npu_exported_symbols(tmp_path / "nothing-here")
