"""bridge-parity with MTP on: the project mapping brings every tensor of a tiny Qwen3.5 checkpoint saved with its
MTP layer (text, MoE, VL) back bit-identical under its released name, and an MTP tensor dropped, renamed or
misplaced by the export fails the verdict naming it."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from harness.checks.bridge_parity import mtp as parity_mtp
from harness.results.records import Status
from trainers import mtp
from trainers.megatron import mapping
from trainers.models import build_model

HAVE_MEGATRON = importlib.util.find_spec("megatron") is not None and importlib.util.find_spec("megatron.core")


def mapping_round_trip(kind: str, folder, tp: int = 1, ep: int = 1) -> dict:
    """The project mapping alone (every rank's shards in this process): the checkpoint's findings."""
    model = build_model(kind, seed=5)
    mtp.save_checkpoint(model, folder, seed=5)
    checkpoint = mtp.read_checkpoint(folder)
    text, outside = mtp.as_text(checkpoint)
    c = mtp.text_config(model.config)
    shards = [[mapping.hf_to_megatron(text, c, tp, rank, ep, ep_rank) for rank in range(tp)] for ep_rank in range(ep)]
    back = mtp.as_released(mapping.megatron_to_hf(shards, c, like=text), mtp.is_vl(checkpoint))
    return {**parity_mtp.findings({k: v for k, v in checkpoint.items() if k not in outside}, back),
            "outside_mapping": len(outside)}


@pytest.mark.parametrize("kind,tp,ep", [("text", 1, 1), ("text", 2, 1), ("moe", 2, 1), ("moe", 1, 2), ("vl", 2, 1)])
def test_every_tensor_comes_back_under_its_released_name(tmp_path, kind, tp, ep):
    found = mapping_round_trip(kind, tmp_path, tp, ep)
    verdict = parity_mtp.verdict(f"{kind}-hybrid-mtp-tp{tp}", found, "project-mapping", tp, ep)
    assert verdict.status == Status.PASS, verdict.message
    assert found["mtp_tensors"] >= 15 and (found["outside_mapping"] > 0) == (kind == "vl")


@pytest.mark.parametrize("broken,named", [("mtp-drop", "unwritten ['mtp.pre_fc_norm_embedding.weight']"),
                                          ("mtp-rename", "renamed ['mtp.final_layernorm.weight']")])
def test_an_mtp_tensor_dropped_or_renamed_fails_naming_it(tmp_path, monkeypatch, broken, named):
    monkeypatch.setattr(mapping, "megatron_to_hf", mapping.megatron_to_hf)  # restored after the break
    parity_mtp.break_export(broken)
    verdict = parity_mtp.verdict("text-hybrid-mtp-tp1", mapping_round_trip("text", tmp_path), "project-mapping")
    assert verdict.status == Status.FAIL and named in verdict.message
    if broken == "mtp-rename":  # the released name is missing too
        assert "unwritten ['mtp.norm.weight']" in verdict.message


def test_a_misplaced_or_wrong_prefix_tensor_is_named():
    a, b = torch.ones(2), torch.zeros(2)
    checkpoint = {"mtp.fc.weight": a, "mtp.norm.weight": b}
    found = parity_mtp.findings(checkpoint, {"mtp.fc.weight": b, "model.language_model.mtp.norm.weight": b})
    assert (found["differs"], found["renamed"], found["unwritten"]) == (
        ["mtp.fc.weight"], ["model.language_model.mtp.norm.weight"], ["mtp.norm.weight"])
    nan = {"mtp.fc.weight": torch.full((2,), float("nan")), "mtp.norm.weight": b}
    assert parity_mtp.findings(nan, nan)["differs"] == ["mtp.fc.weight"]  # NaN is never bit-identical


def test_a_missing_round_trip_an_error_or_no_mtp_tensor_fails():
    assert parity_mtp.verdict("x", None, "project-mapping").status == Status.FAIL
    refused = parity_mtp.verdict("x", {"error": "KeyError: 'mtp.fc.weight'"}, "project-mapping")
    assert refused.status == Status.FAIL and "mtp.fc.weight" in refused.message
    empty = {"compared": 3, "mtp_tensors": 0, "unwritten": [], "renamed": [], "differs": []}
    assert "no MTP tensor" in parity_mtp.verdict("x", empty, "project-mapping").message


def test_an_hf_state_with_two_mtp_layers_is_refused_by_name():
    with pytest.raises(NotImplementedError, match="2 MTP layers"):
        mapping.mtp_layers_in(["mtp.layers.0.input_layernorm.weight", "mtp.layers.1.input_layernorm.weight"])


@pytest.fixture(scope="module")
def one_rank():
    """A one-rank gloo group with megatron-core's model-parallel state (TP=EP=1) and the CPU and kernel shims the
    ranks install (megatron-core's GatedDeltaNet refuses to build without FLA otherwise), torn down after."""
    if not HAVE_MEGATRON:
        pytest.skip("megatron-core is not installed")
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from trainers.megatron.config import ParallelSizes
    from trainers.megatron.cpu_shim import cpu_shim_for
    from trainers.megatron.kernel_shim import KernelShim
    from trainers.megatron.train import init_distributed, init_model_parallel
    from trainers.runtime.device import plan

    init_distributed(plan("cpu"))
    init_model_parallel(ParallelSizes())
    shim = cpu_shim_for(plan("cpu")).install(seed=0, tp_rank=0, ep_rank=0)
    kernels = KernelShim().install()
    yield ParallelSizes()
    kernels.remove()
    shim.remove()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


@pytest.mark.parametrize("kind", ["text", "moe", "vl"])
def test_megatron_cores_mtp_block_takes_and_gives_back_every_mtp_tensor(tmp_path, one_rank, kind):
    found = parity_mtp.project_round_trip(build_model(kind, seed=7), one_rank, 7, tmp_path)
    verdict = parity_mtp.verdict(f"{kind}-hybrid-mtp-tp1", found, "project-mapping", 1, 1)
    assert verdict.status == Status.PASS, verdict.message
    assert found["megatron_mtp_tensors"] > 0 and found["megatron_mtp_layer"] in mapping.MTP_LAYER_NAMES


def test_a_megatron_model_without_an_mtp_block_refuses_the_mtp_tensors(tmp_path, one_rank):
    from trainers.megatron import bridge
    from trainers.megatron.model import build_gpt_model

    model = build_model("text", seed=7)
    mtp.save_checkpoint(model, tmp_path, seed=7)
    with pytest.raises(KeyError, match=r"unexpected \['mtp\.layers\.0\.eh_proj\.weight'"):
        bridge.load_hf_into_megatron(build_gpt_model(model.config, one_rank), mtp.read_checkpoint(tmp_path),
                                     model.config)
