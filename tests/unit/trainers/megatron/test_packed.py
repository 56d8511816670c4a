"""The packed-GDN probe keeps megatron-core's own answer apart from the harness's deterministic mode, and with
FLA's kernels emulated it is held to an implementation other than the one under test.

A stand-in layer behaves as megatron-core 0.19.2's GatedDeltaNet does (its forward read from the installed
package): packed (THD) input asserts `not deterministic_mode`; outside that mode it calls FLA's
`causal_conv1d` and `chunk_gated_delta_rule` with cu_seqlens, names its module binds to None without FLA;
in deterministic mode it runs `torch_chunk_gated_delta_rule`, which takes no cu_seqlens.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from harness.checks.bridge_parity import packed_verdict
from harness.results.records import Status
from trainers.megatron.packed import probe_packed_gdn

causal_conv1d = None  # what megatron-core binds without flash-linear-attention
chunk_gated_delta_rule = None


def torch_chunk_gated_delta_rule(q, k, v, g, beta, initial_state=None, output_final_state=False,
                                 use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    if cu_seqlens is not None:
        raise AssertionError("cu_seqlens is not supported for torch_chunk_gated_delta_rule for now.")
    return v.cumsum(dim=1), None  # a recurrence: each position carries the state of all before it


class GatedDeltaNetLike(torch.nn.Module):
    def __init__(self, deterministic: bool, honour_boundaries: bool = True, refuse_packed: bool = False):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=4, deterministic_mode=deterministic)
        self.weight = torch.nn.Parameter(torch.tensor([[0.5, 1.0]] * 4))  # (D, W) depthwise conv
        self.honour, self.refuse = honour_boundaries, refuse_packed
        self.gated_delta_rule = torch_chunk_gated_delta_rule if deterministic else chunk_gated_delta_rule

    def forward(self, hidden_states, attention_mask, packed_seq_params=None):
        cu = None
        if packed_seq_params is not None and packed_seq_params.qkv_format == "thd":
            if self.refuse:
                raise NotImplementedError("GDN does not support packed sequence for now.")
            if self.config.deterministic_mode:  # megatron-core's `assert` (pytest would rewrite one here)
                raise AssertionError("Packed sequence does not support deterministic mode.")
            cu = packed_seq_params.cu_seqlens_q if self.honour else None
        x = hidden_states.transpose(0, 1)  # (B, S, H)
        if self.config.deterministic_mode:
            padded = torch.nn.functional.pad(x.transpose(1, 2), (1, 0))
            x = torch.nn.functional.conv1d(padded, self.weight.unsqueeze(1), groups=4).transpose(1, 2)
        else:
            x, _ = causal_conv1d(x=x, weight=self.weight, bias=None, activation=None, cu_seqlens=cu)
        v = x.unsqueeze(2)
        out, _ = self.gated_delta_rule(v, v, v, g=torch.zeros_like(v), beta=torch.ones_like(v), cu_seqlens=cu)
        return out.squeeze(2).transpose(0, 1), None


def independent(x):
    """The stand-in layer's arithmetic written apart from it, for one (1, T, H) sequence: the causal conv
    y_t = 0.5 x_(t-1) + x_t, then the running sum (the recurrence with g = 0, beta = 1)."""
    y = x.clone()
    y[:, 1:] += 0.5 * x[:, :-1]
    return y.cumsum(dim=1)


REFERENCE = "an independent implementation"


def test_a_refusal_by_the_harness_deterministic_mode_is_not_megatron_cores():
    probe = probe_packed_gdn(GatedDeltaNetLike(deterministic=True), reference=independent, reference_name=REFERENCE)
    assert probe["deterministic_mode_error"] == "AssertionError: Packed sequence does not support deterministic mode."
    assert probe["accepted"] and probe["keeps_sequences_apart"] and probe["matches_padded"]
    assert probe["matches_reference"] and probe["max_reference_error"] < 1e-6
    assert probe["emulated_kernels"] == ["causal_conv1d", "chunk_gated_delta_rule"]
    verdict = packed_verdict({"packed": probe})
    assert verdict.status == Status.PASS and verdict.emulated
    assert "accepts packed (THD) input" in verdict.message and "refuses packed" not in verdict.message
    assert "only the harness's deterministic_mode" in verdict.message and "emulated: FLA's" in verdict.message
    assert f"against {REFERENCE}: max error" in verdict.message
    assert causal_conv1d is None and chunk_gated_delta_rule is None  # the stand-ins were taken back


def test_a_recurrence_wrong_on_every_side_of_the_emulation_fails_against_the_independent_reference(monkeypatch):
    """The torch rule that both the emulated kernels and the padded path run is wrong: packed, alone and padded
    agree with each other, and only the reference written apart from it shows the error."""
    monkeypatch.setitem(globals(), "torch_chunk_gated_delta_rule",
                        lambda q, k, v, g, beta, **kwargs: (v.cumsum(dim=1) * 1.5, None))
    probe = probe_packed_gdn(GatedDeltaNetLike(deterministic=True), reference=independent, reference_name=REFERENCE)
    assert probe["keeps_sequences_apart"] and probe["matches_padded"] and not probe["matches_reference"]
    verdict = packed_verdict({"packed": probe})
    assert verdict.status == Status.FAIL and verdict.emulated and f"differs from {REFERENCE}" in verdict.message


def test_an_emulated_probe_without_a_reference_cannot_pass():
    probe = probe_packed_gdn(GatedDeltaNetLike(deterministic=True))
    assert probe["keeps_sequences_apart"] and probe["matches_reference"] is None
    verdict = packed_verdict({"packed": probe})
    assert verdict.status == Status.FAIL and "held to no implementation but megatron-core's own" in verdict.message


def test_megatron_cores_own_refusal_is_reported_as_its_own():
    probe = probe_packed_gdn(GatedDeltaNetLike(deterministic=True, refuse_packed=True))
    assert not probe["accepted"] and probe["deterministic_mode_error"] is None
    verdict = packed_verdict({"packed": probe})
    assert verdict.status == Status.PASS and "refuses packed (THD) input (NotImplementedError" in verdict.message


def test_a_layer_that_drops_the_boundaries_fails_outside_deterministic_mode_too():
    probe = probe_packed_gdn(GatedDeltaNetLike(deterministic=True, honour_boundaries=False))
    assert probe["accepted"] and not probe["keeps_sequences_apart"] and not probe["matches_padded"]
    verdict = packed_verdict({"packed": probe})
    assert verdict.status == Status.FAIL and "leaks state" in verdict.message


def test_a_packed_verdict_that_could_not_ask_megatron_core_fails_instead_of_blaming_it():
    probe = {"accepted": False, "error": "TypeError: 'NoneType' object is not callable", "deterministic_mode": True,
             "deterministic_mode_error": "AssertionError: Packed sequence does not support deterministic mode.",
             "emulated_kernels": [], "max_leak": None, "max_padded_error": None, "keeps_sequences_apart": None,
             "matches_padded": None}
    verdict = packed_verdict({"packed": probe})
    assert verdict.status == Status.FAIL and "own answer is not measured" in verdict.message


def test_the_trainers_refusal_names_its_deterministic_mode_not_megatron_core(monkeypatch):
    from trainers.megatron import packed

    layer = GatedDeltaNetLike(deterministic=True)
    monkeypatch.setattr(packed, "gated_delta_net_layers", lambda model: [layer])
    reason = packed.packed_refusal(layer, "0.19.2")
    assert reason.startswith("packed (THD) batches refused: with deterministic_mode")
    assert "flash-linear-attention" in reason and "use_remove_padding=false" in reason
    own = GatedDeltaNetLike(deterministic=True, refuse_packed=True)
    monkeypatch.setattr(packed, "gated_delta_net_layers", lambda model: [own])
    assert "megatron-core 0.17.0's GatedDeltaNet raised NotImplementedError" in packed.packed_refusal(own, "0.17.0")
