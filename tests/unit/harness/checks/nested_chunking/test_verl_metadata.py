"""verl's non-tensor data through its chunk and concat (`verl:chunking/metadata`): needs verl; breaking verl's
concatenation (outputs out of order) fails the verdict."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.verl
pytest.importorskip("verl")
pytest.importorskip("ray")

from harness.checks.nested_chunking import verl_metadata
from harness.results.records import Status


def test_the_verdict_names_verls_chunk_and_concat():
    made = verl_metadata.verdict()
    assert made.name == "verl:chunking/metadata"
    assert made.metrics["verl"]["ran"][1:3] == ["verl.protocol.BatchData.chunk", "verl.protocol.BatchData.concat"]
    assert made.status in (Status.PASS, Status.FAIL)
    if made.status is Status.FAIL:  # tensordict releases that stack the ranks' metrics into a list
        assert "metrics read back as" in made.message, made.message


def test_a_concatenation_that_reorders_the_ranks_fails_the_verdict(monkeypatch):
    from verl.utils import tensordict_utils

    real = tensordict_utils.concat_tensordict
    monkeypatch.setattr(tensordict_utils, "concat_tensordict", lambda data: real(list(reversed(data))))
    broken = verl_metadata.verdict()
    assert broken.status is Status.FAIL and "output row 0" in broken.message, broken.message
