"""verl's own chunking as nested-chunking's verl side: the row-by-row judge on stand-in batches (no verl needed), and
with verl installed its verdicts, which fail when verl's chunker is replaced by a plain TensorDict.chunk."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

from harness.checks.nested_chunking import verl_chain
from harness.results.records import Status


def _nested_batch(rows):
    from tensordict import TensorDict

    ids = torch.nested.as_nested_tensor([r[0] for r in rows], layout=torch.jagged)
    pos = torch.nested.as_nested_tensor([r[1] for r in rows], layout=torch.jagged)
    return TensorDict({"input_ids": ids, "position_ids": pos, "row": torch.arange(len(rows))}, batch_size=[len(rows)])


def test_the_padded_rollout_names_each_row_in_its_values():
    batch, rows = verl_chain.padded_rollout((3, 1, 2), mrope=True)
    assert batch["position_ids"].shape == (3, 4, 5) and [len(r[0]) for r in rows] == [3, 1, 2]
    assert rows[1][0].tolist() == [1000] and rows[2][1][:, 1].tolist() == [2001, 2101, 2201, 2301]
    assert batch["attention_mask"].sum(dim=1).tolist() == [3, 1, 2]


def test_the_row_judge_passes_the_original_rows_and_names_a_swapped_or_cut_row():
    _, rows = verl_chain.padded_rollout((3, 1, 2), mrope=False)
    verl_chain.check_rows(_nested_batch(rows), rows, "stage")
    swapped = [rows[0], rows[2], rows[1]]  # rows 1 and 2 hold each other's values under their own ids
    with pytest.raises(verl_chain.Wrong, match="stage: row 1 input_ids"):
        verl_chain.check_rows(_nested_batch(swapped), rows, "stage")
    cut = [rows[0], rows[1], (rows[2][0][:1], rows[2][1][:1])]
    with pytest.raises(verl_chain.Wrong, match=r"row 2 input_ids \(1,\) is not the original \(2,\)"):
        verl_chain.check_rows(_nested_batch(cut), rows, "stage")


def test_the_expected_model_inputs_are_the_rows_concatenated_or_padded():
    _, rows = verl_chain.padded_rollout((2, 3), mrope=True)
    ids, pos = verl_chain.expected_inputs(rows, [1, 0], packed=True, mrope=True)
    assert ids.tolist() == [[1000, 1001, 1002, 0, 1]] and pos.shape == (4, 1, 5)
    ids, pos = verl_chain.expected_inputs(rows, [0, 1], packed=False, mrope=True)
    assert ids.tolist() == [[0, 1, 0], [1000, 1001, 1002]] and pos.shape == (4, 2, 3) and pos[3, 0].tolist() == [300,
                                                                                                            301, 0]


# --- with verl installed (the `tests-verl` session) ---------------------------------------------------------------


@pytest.fixture
def verl_release():
    pytest.importorskip("verl")
    pytest.importorskip("ray")


@pytest.mark.verl
def test_verls_chain_keeps_jagged_and_text_rows_and_names_the_functions_it_ran(verl_release):
    from harness.checks.support import verl

    jagged = verl.attributed(verl_chain.case_verdict("jagged", **verl_chain.CASES["jagged"]))
    text = verl.attributed(verl_chain.case_verdict("text-ids", **verl_chain.CASES["text-ids"]))
    if jagged.status is Status.SKIP:
        pytest.skip(jagged.message)  # verl code that imports an accelerator-only package
    assert jagged.name == "verl:chunking/jagged"
    assert jagged.status is Status.PASS and text.status is Status.PASS, (jagged.message, text.message)
    ran = jagged.metrics["verl"]["ran"]
    assert "verl.protocol.BatchData.chunk" in ran and "verl.workers.engine.utils.prepare_micro_batches" in ran


def _plain_chunk_splits_jagged() -> bool:
    _, rows = verl_chain.padded_rollout((3, 1, 2, 4), mrope=True)
    try:
        return all(len(part) == 2 for part in _nested_batch(rows).chunk(2))
    except Exception:  # noqa: BLE001 - this tensordict's own chunk refuses jagged tensors
        return False


@pytest.mark.verl
def test_a_chunker_that_hands_a_worker_the_other_workers_rows_fails_the_jagged_verdict(verl_release, monkeypatch):
    from verl.utils import tensordict_utils

    real = tensordict_utils.chunk_tensordict

    def misaligned(td, chunks):
        parts = real(td, chunks)
        if len(parts) == 2 and len(parts[0]) == len(parts[1]):  # the row ids swapped, the values left in place
            parts[0]["row"], parts[1]["row"] = parts[1]["row"].clone(), parts[0]["row"].clone()
        return parts

    monkeypatch.setattr(tensordict_utils, "chunk_tensordict", misaligned)
    broken = verl_chain.case_verdict("jagged", **verl_chain.CASES["jagged"])
    if broken.status is Status.SKIP:
        pytest.skip(broken.message)
    assert broken.status is Status.FAIL and "BatchData.chunk[0]: row 4 input_ids" in broken.message, broken.message


@pytest.mark.verl
def test_a_plain_tensordict_chunk_in_place_of_verls_chunker_fails_the_jagged_verdict(verl_release, monkeypatch):
    if _plain_chunk_splits_jagged():
        pytest.skip("this tensordict's own chunk splits jagged tensors: a plain chunk is no break here")
    from verl.utils import tensordict_utils

    monkeypatch.setattr(tensordict_utils, "chunk_tensordict", lambda td, chunks: list(td.chunk(chunks)))
    broken = verl_chain.case_verdict("jagged", **verl_chain.CASES["jagged"])
    if broken.status is Status.SKIP:
        pytest.skip(broken.message)
    assert broken.status is Status.FAIL and "verl's chunking raises" in broken.message, broken.message
