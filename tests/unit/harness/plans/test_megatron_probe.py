"""The launch-plans rule for `remove_padding` follows what the installed GatedDeltaNet's forward does with
packed input, in megatron-core's default mode and in its deterministic mode, each asked of its own code.

Stand-in layer classes carry the guards as the releases wrote them (read from the packages): 0.16.1 and
0.17.0 raise NotImplementedError on THD input; 0.18.0 and 0.19.2 assert `not deterministic_mode` and go on
into their packed path (`_resolve_cu_seqlens`)."""
from __future__ import annotations

import sys
import types

import pytest
from plan_helpers import write_plan

from harness.plans import megatron_probe, rules
from harness.plans.plan_format import load_plan

needs_mcore = pytest.mark.skipif(megatron_probe.version() is None, reason="megatron-core not installed")


class RefusesPacked:  # 0.16.1 / 0.17.0
    def forward(self, hidden_states, attention_mask, packed_seq_params=None):
        if packed_seq_params is not None and packed_seq_params.qkv_format == "thd":
            raise NotImplementedError("GDN does not support packed sequence for now.")
        return self.in_proj(hidden_states)


class PackedOutsideDeterministicMode:  # 0.18.0 / 0.19.2
    def forward(self, hidden_states, attention_mask, packed_seq_params=None):
        if packed_seq_params is not None and packed_seq_params.qkv_format == "thd":
            if self.config.deterministic_mode:
                raise AssertionError("Packed sequence does not support deterministic mode.")
            self._resolve_cu_seqlens(packed_seq_params.cu_seqlens_q_padded, packed_seq_params.cu_seqlens_q)
        return self.in_proj(hidden_states)


def _with_layer(monkeypatch, layer_class):
    module = types.ModuleType("megatron.core.ssm.gated_delta_net")
    module.GatedDeltaNet = layer_class
    monkeypatch.setitem(sys.modules, "megatron.core.ssm.gated_delta_net", module)


@needs_mcore
def test_a_release_that_refuses_packed_input_fails_remove_padding(tmp_path, monkeypatch):
    _with_layer(monkeypatch, RefusesPacked)
    refuses, why = megatron_probe.gdn_refuses_packed()
    assert refuses is True and "NotImplementedError" in why
    found = rules.check(load_plan(write_plan(tmp_path, batch__remove_padding=True)))
    assert [f for f in found if f.field == "batch.remove_padding" and f.status == rules.FAIL]


@needs_mcore
def test_a_release_that_takes_packed_input_outside_deterministic_mode_allows_it_and_says_what_it_needs(
        tmp_path, monkeypatch):
    _with_layer(monkeypatch, PackedOutsideDeterministicMode)
    refuses, why = megatron_probe.gdn_refuses_packed()
    assert refuses is False and "went on to _resolve_cu_seqlens" in why
    assert "in deterministic_mode it refuses" in why and "deterministic_mode off" in why
    found = rules.check(load_plan(write_plan(tmp_path, batch__remove_padding=True)))
    packed = [f for f in found if f.field == "batch.remove_padding"]
    assert packed and packed[0].status == rules.OK and "deterministic_mode" in packed[0].message
