"""patch-parity's packed-sp verdicts on real ranks (2, gloo on CPU; forked where this process may fork, else
torchrun): the trainer's sequence-parallel forward of a packed row matches each sequence's own forward, the
same forward without the row's cu_seqlens fails, and in a verl row verl's side is a skip that ran verl's own
function on those ranks."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers.models.qwen3_5")

from harness.checks.patch_parity import packed_sp  # noqa: E402
from harness.checks.support import verl  # noqa: E402
from harness.results.records import Status  # noqa: E402

TOLERANCE = 1e-5  # patch-parity's float32 output tolerance


def test_the_sequence_parallel_forward_of_a_packed_row_matches_each_sequence_alone(tmp_path):
    trainer = packed_sp.packed_sp_verdicts(TOLERANCE, 0, tmp_path)[0]
    assert trainer.status is Status.PASS, trainer.message
    assert trainer.metrics["max_abs_error"] <= TOLERANCE and trainer.metrics["boundaries_passed"]


def test_the_forward_without_cu_seqlens_mixes_the_sequences_and_fails(tmp_path):
    trainer = packed_sp.packed_sp_verdicts(TOLERANCE, 0, tmp_path, broken=True)[0]
    assert trainer.status is Status.FAIL, trainer.message
    first, *later = trainer.metrics["per_sequence"]
    assert first <= TOLERANCE  # nothing precedes the first sequence: only the later ones can leak
    assert min(later) > 100 * TOLERANCE


@pytest.mark.verl
def test_verls_side_is_a_skip_that_ran_verls_context_parallel_set_up_on_the_ranks(tmp_path):
    pytest.importorskip("verl")
    trainer, on_verl = packed_sp.packed_sp_verdicts(TOLERANCE, 0, tmp_path)
    on_verl = verl.attributed(on_verl)
    assert trainer.status is Status.PASS, trainer.message
    assert on_verl.name == "verl:packed-sp:text" and on_verl.status is Status.SKIP, on_verl.message
    assert on_verl.metrics["verl"]["ran"] == ["verl.models.transformers.qwen3_5._build_fla_cp_context"]
    assert "verl/models/transformers/qwen3_5.py:" in on_verl.message and "fla" in on_verl.message
