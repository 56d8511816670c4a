"""The bridges' answer about a model type (trainers/megatron/bridge.py bridge_support) is asked once per
environment: asking Megatron-Bridge imports it (about 12 s on a core) in every rank of every launch otherwise.
Kept in the process and in the harness's folder under a key of the environment, its site-packages' state, the
bridges' versions and the model; not used where a Transformer Engine or Megatron-Bridge is already loaded."""
from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("torch")

from harness.execution.cell import BRIDGE_SUPPORT_CACHE  # noqa: E402
from trainers.megatron import bridge  # noqa: E402


class _Config:
    def __init__(self, model_type="qwen3_5_text", architectures=("Qwen3_5ForCausalLM",)):
        self.model_type, self.architectures = model_type, list(architectures)


@pytest.fixture
def asked(monkeypatch, tmp_path):
    """The calls that reached the bridges, with a fresh process's memory and the harness's cache folder set."""
    calls = []

    def ask(config):
        calls.append(config.model_type)
        return {"model_type": config.model_type, "megatron_bridge_error": f"answer {len(calls)}"}

    monkeypatch.setattr(bridge, "_ask_bridges", ask)
    monkeypatch.setattr(bridge, "_ANSWERS", {})
    monkeypatch.setenv(BRIDGE_SUPPORT_CACHE, str(tmp_path / "answers"))
    monkeypatch.delitem(sys.modules, "transformer_engine", raising=False)
    return calls


def test_the_harness_and_the_trainer_name_the_same_variable():
    assert bridge.CACHE_VARIABLE == BRIDGE_SUPPORT_CACHE


def test_asked_once_per_process_and_once_per_environment(asked, monkeypatch):
    first = bridge.bridge_support(_Config())
    assert bridge.bridge_support(_Config()) == first and asked == ["qwen3_5_text"]
    monkeypatch.setattr(bridge, "_ANSWERS", {})  # the next process of the same environment: read, not asked
    assert bridge.bridge_support(_Config()) == first and asked == ["qwen3_5_text"]
    bridge.bridge_support(_Config("qwen3_5_moe_text", ("Qwen3_5MoeForCausalLM",)))  # another model: asked
    assert asked == ["qwen3_5_text", "qwen3_5_moe_text"]


def test_a_change_in_the_environment_asks_again(asked, monkeypatch):
    bridge.bridge_support(_Config())
    monkeypatch.setattr(bridge, "_ANSWERS", {})
    monkeypatch.setattr(bridge, "_version", lambda name: "9.9" if name == "megatron-bridge" else None)
    assert bridge.bridge_support(_Config())["megatron_bridge_error"] == "answer 2" and len(asked) == 2


@pytest.mark.parametrize("loaded", ["transformer_engine", "megatron.bridge"])
def test_a_loaded_transformer_engine_or_megatron_bridge_is_always_asked(asked, monkeypatch, loaded):
    bridge.bridge_support(_Config())
    monkeypatch.setitem(sys.modules, loaded, types.ModuleType(loaded))
    assert bridge.bridge_support(_Config())["megatron_bridge_error"] == "answer 2"


def test_without_the_folder_or_with_an_unwritable_one_the_answer_is_still_given(asked, monkeypatch, tmp_path):
    monkeypatch.delenv(BRIDGE_SUPPORT_CACHE)
    assert bridge.bridge_support(_Config())["megatron_bridge_error"] == "answer 1"
    monkeypatch.setattr(bridge, "_ANSWERS", {})
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(BRIDGE_SUPPORT_CACHE, str(tmp_path / "file" / "below"))
    assert bridge.bridge_support(_Config())["megatron_bridge_error"] == "answer 2"
    assert not list(tmp_path.glob("**/*.tmp"))


def test_a_damaged_cache_file_is_asked_again(asked, monkeypatch, tmp_path):
    bridge.bridge_support(_Config())
    for path in (tmp_path / "answers").iterdir():
        path.write_text("{not json")
    monkeypatch.setattr(bridge, "_ANSWERS", {})
    assert bridge.bridge_support(_Config())["megatron_bridge_error"] == "answer 2"
