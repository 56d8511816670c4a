"""What verl's engine runs on: the model types verl dispatches on, classes put back after its patch, and failures
named by file and line (an accelerator-only import is something this runner cannot run, not verl's failure)."""
from __future__ import annotations

import pytest
from qwen35_helpers import qwen35_or_skip

from harness.checks.support import verl_engine


def test_an_import_only_accelerators_satisfy_is_a_cannot_run_here_naming_the_line():
    try:
        raise ModuleNotFoundError("No module named 'flash_attn'", name="flash_attn")
    except ModuleNotFoundError as exc:
        failure = verl_engine.failure(exc)
    assert failure["error_class"] == "ModuleNotFoundError"
    assert "a package only accelerator machines have: it runs on a GPU/NPU runner" in failure["cannot_run_here"]
    assert failure["where"].startswith("test_verl_engine.py:")  # no verl or transformers frame: the innermost


def test_other_failures_keep_their_text_without_the_environments_path():
    try:
        raise ImportError("cannot import name 'X' from 'y' (/some/env/lib/python3.11/site-packages/transformers/y.py)")
    except ImportError as exc:
        failure = verl_engine.failure(exc)
    assert failure["cannot_run_here"] == "" and "/some/env" not in failure["error"]
    assert "(transformers/y.py)" in failure["error"]


def test_the_vl_moe_model_is_the_type_verl_patches_and_classes_come_back():
    qwen35_or_skip()
    import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5

    model = verl_engine.build_model("qwen3_5_moe")
    assert model.config.model_type == "qwen3_5_moe" and hasattr(model.model, "visual")
    assert {verl_engine.build_model(t).config.model_type for t in ("qwen3_5", "qwen3_5_text")} == {
        "qwen3_5", "qwen3_5_text"}
    forward = qwen3_5.Qwen3_5DecoderLayer.forward
    with verl_engine.patches_restored():
        qwen3_5.Qwen3_5DecoderLayer.forward = lambda self: None
        qwen3_5.Qwen3_5DecoderLayer.added = 1
    assert qwen3_5.Qwen3_5DecoderLayer.forward is forward and not hasattr(qwen3_5.Qwen3_5DecoderLayer, "added")
    with pytest.raises(ValueError, match="unknown model type"):
        verl_engine.build_model("qwen3_5_moe_text")
