"""patch-parity's packed-sp verdicts: the trainer's verdict from per-sequence errors, verl's from what the ranks'
call of verl's function recorded (against a stand-in verl release, so these run where verl is absent), and the
paths that start no ranks. The ranks themselves run in tests/e2e/test_packed_sp_ranks.py."""
from __future__ import annotations

import math
import sys
import textwrap

import pytest
from verl_suite_helpers import fake_verl

from harness.checks.patch_parity import packed_sp
from harness.checks.support import verl
from harness.results.records import Status

STAND_IN = textwrap.dedent("""\
    def _build_fla_cp_context(cu_seqlens, cu_seqlens_cpu, conv_kernel_size):
        group = None
        from fla.ops.cp.context import build_cp_context
        return build_cp_context(cu_seqlens)
    """)


@pytest.fixture
def stand_in_verl(tmp_path, monkeypatch):
    """verl 9.9.0 whose qwen3_5 module holds a context-parallel set-up that imports fla (line 3)."""
    site = fake_verl(tmp_path / "site", version="9.9.0")
    models = site / "verl" / "models" / "transformers"
    models.mkdir(parents=True)
    for package in (site / "verl" / "models", models):
        (package / "__init__.py").write_text("")
    (models / "qwen3_5.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        del sys.modules[name]


def test_sequences_within_the_tolerance_pass_and_the_message_names_the_launcher():
    verdict = packed_sp.trainer_verdict([1e-7, 2e-7, 1.5e-7, 1e-7], 1e-5, True, "torchrun")
    assert verdict.status is Status.PASS and verdict.name == "packed-sp:text"
    assert "torchrun ranks" in verdict.message and verdict.metrics["max_abs_error"] == 2e-7


def test_a_leak_across_sequences_fails_and_says_the_boundaries_were_left_out():
    verdict = packed_sp.trainer_verdict([1e-7, 6.5e-2, 6.7e-2, 6.2e-2], 1e-5, False, "forked")
    assert verdict.status is Status.FAIL
    assert "given no cu_seqlens" in verdict.message and "6.70e-02 (> 1e-05)" in verdict.message


def test_a_nan_in_any_sequence_fails():
    verdict = packed_sp.trainer_verdict([1e-7, math.nan, 2e-7, 1e-7], 1e-5, True, "forked")
    assert verdict.status is Status.FAIL and math.isnan(verdict.metrics["max_abs_error"])


def test_fewer_ranks_than_the_check_needs_is_a_skip_without_starting_any(monkeypatch, tmp_path):
    monkeypatch.setattr(packed_sp, "launch", lambda *a, **k: pytest.fail("no rank may start"))
    [verdict] = packed_sp.packed_sp_verdicts(1e-5, 0, tmp_path, max_ranks=1)
    assert verdict.status is Status.SKIP and "needs 2 ranks" in verdict.message


def test_ranks_that_failed_fail_the_trainer_verdict_with_their_log_and_claim_nothing_of_verl(monkeypatch, tmp_path):
    (tmp_path / "packed-sp.log").write_text("RuntimeError: gloo connect refused\n")
    monkeypatch.setattr(packed_sp, "launch", lambda *a, **k: (None, "torchrun"))
    monkeypatch.setattr(verl, "installed", lambda: "9.9.0")
    trainer, on_verl = packed_sp.packed_sp_verdicts(1e-5, 0, tmp_path)
    assert trainer.status is Status.FAIL and "gloo connect refused" in trainer.message
    assert on_verl.status is Status.ERROR and not on_verl.name.startswith(verl.PREFIX)
    assert "verl" not in on_verl.metrics


def test_without_verl_there_is_no_verl_verdict(monkeypatch, tmp_path):
    monkeypatch.setattr(packed_sp, "launch", lambda *a, **k: (None, "forked"))
    monkeypatch.setattr(verl, "installed", lambda: None)
    assert [v.name for v in packed_sp.packed_sp_verdicts(1e-5, 0, tmp_path)] == ["packed-sp:text"]


def test_a_verl_without_the_function_is_a_plain_skip_that_records_nothing_of_verl(stand_in_verl):
    verdict = packed_sp.verl_verdict({"called": None})
    assert verdict.status is Status.SKIP and verdict.name == "packed-sp:text/verl"
    assert "nothing of verl ran" in verdict.message and "verl" not in verdict.metrics
    assert verl.attributed(verdict) is verdict  # not named for verl: the guard leaves it alone


def test_verls_call_is_a_skip_naming_its_import_line_and_what_it_raised(stand_in_verl):
    probe = {"called": "verl.models.transformers.qwen3_5._build_fla_cp_context",
             "error": "ModuleNotFoundError: No module named 'fla'"}
    verdict = verl.attributed(packed_sp.verl_verdict(probe))
    assert verdict.status is Status.SKIP and verdict.name == "verl:packed-sp:text"
    assert "verl/models/transformers/qwen3_5.py:3: from fla.ops.cp.context import build_cp_context" in verdict.message
    assert "raised ModuleNotFoundError" in verdict.message and "needs an accelerator" in verdict.message
    assert verdict.metrics["verl"]["ran"] == ["verl.models.transformers.qwen3_5._build_fla_cp_context"]


def test_a_verl_verdict_whose_function_is_not_verls_fails(stand_in_verl, monkeypatch):
    from verl.models.transformers import qwen3_5

    def _build_fla_cp_context(cu_seqlens, cu_seqlens_cpu, conv_kernel_size):  # this project's, not verl's
        from fla.ops.cp.context import build_cp_context  # noqa: F401
    monkeypatch.setattr(qwen3_5, "_build_fla_cp_context", _build_fla_cp_context)
    probe = {"called": "verl.models.transformers.qwen3_5._build_fla_cp_context", "error": None, "returned": "X"}
    verdict = verl.attributed(packed_sp.verl_verdict(probe))
    assert verdict.status is Status.FAIL and "not the installed verl's code" in verdict.message


def test_a_verl_module_that_does_not_import_is_verls_failure_and_leaves_the_ranks_result_standing(stand_in_verl):
    """verl 0.9.1's qwen3_5 module imports a class transformers 5.23.0 no longer has: the ranks record verl's
    ImportError with its line (their own forward's result stands), and verl's verdict fails naming it."""
    import torch

    from harness.checks.patch_parity import packed_sp_ranks

    module = stand_in_verl / "verl" / "models" / "transformers" / "qwen3_5.py"
    module.write_text("import math\nfrom math import Qwen3_5CausalLMOutputWithPast\n")
    probe = packed_sp_ranks.verl_context(torch.tensor([0, 3, 7]), 4, None)
    assert probe["called"] is None and probe["import_error"].startswith("ImportError at verl/models/transformers/")
    assert probe["raised_in"] == "verl/models/transformers/qwen3_5.py:2" and probe["cannot_run_here"] is None
    verdict = verl.attributed(packed_sp.verl_verdict(probe))
    assert verdict.status is Status.FAIL and verdict.name == "verl:packed-sp:text"
    assert "Qwen3_5CausalLMOutputWithPast" in verdict.message and "cannot start on this stack" in verdict.message


def test_a_verl_module_that_needs_an_accelerator_package_is_a_skip(stand_in_verl):
    verdict = verl.attributed(packed_sp.verl_verdict(
        {"called": None, "import_error": "ModuleNotFoundError at verl/x.py:1: No module named 'flash_attn'",
         "raised_in": "verl/x.py:1", "cannot_run_here": "could not run on this runner: verl/x.py:1 imports "
         "flash_attn, which exists only for an accelerator"}))
    assert verdict.status is Status.SKIP and "could not run on this runner" in verdict.message
