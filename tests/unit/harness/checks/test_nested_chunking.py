"""Check nested-chunking: an outcome is recorded at every level, the trainer level passes, and the
check FAILS (by values) when the trainer's chunk function truncates, flips the ragged dim or
drops max_seqlen. What upstream torch/tensordict do is not hard-coded: it differs by version."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

from harness.checks import CheckOptions, nested_chunking
from harness.checks.nested_chunking.probes import FAMILIES, judge_dense, judge_nested
from harness.results.records import CheckResult, Status
from trainers.grpo import data

OUTCOME_PREFIXES = ("ok", "raises:", "wrong:")
REAL_CHUNKER = data.chunk_tensordict  # the broken chunkers below start from the real one


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    res = nested_chunking.run(CheckOptions(work_dir=tmp_path_factory.mktemp("nc")))
    # The outcome table for this torch/tensordict, visible with -s (and kept in the JSON result).
    print(f"\ntorch {res.metrics['torch']} tensordict {res.metrics['tensordict']}: {res.status.value}")
    print(nested_chunking.outcome_table(res))
    return res


def test_trainer_level_passes_and_every_level_is_recorded(result):
    assert result.status in (Status.PASS, Status.AFFECTED), result.message
    assert result.metrics["torch"] == torch.__version__
    assert result.metrics["tensordict"]
    table = result.metrics["table"]
    assert set(table) == set(FAMILIES)
    for name, levels in table.items():
        assert set(levels) == {"torch", "tensordict", "trainer"}
        assert levels["tensordict"], name  # every family has tensordict outcomes
        if FAMILIES[name].transform != "consolidate+pickle":
            assert levels["torch"], name  # raw torch has no consolidate(): that family is n/a there
        for level in ("torch", "tensordict", "trainer"):
            for outcome in (levels[level] or {}).values():
                assert outcome.startswith(OUTCOME_PREFIXES), (name, level, outcome)
        assert set(levels["trainer"].values()) == {"ok"}, (name, levels["trainer"])
    trainer = [v for v in result.verdicts if v.name.endswith("/trainer")]
    assert len(trainer) == len(FAMILIES) + 1 and all(v.status is Status.PASS for v in trainer)  # + grpo-update
    upstream = [v for v in result.verdicts if not v.name.endswith("/trainer")]
    assert all(v.status in (Status.PASS, Status.AFFECTED) for v in upstream)
    expected = Status.AFFECTED if any(v.status is Status.AFFECTED for v in upstream) else Status.PASS
    assert result.status is expected
    # The result survives serialisation, as the cell runner stores it.
    assert CheckResult.from_dict(json.loads(json.dumps(result.to_dict()))).metrics["table"] == table


def truncating_chunker(td, chunks):
    """Drops the last position of the longest sample of every jagged entry in each chunk."""
    out = []
    for chunk in REAL_CHUNKER(td, chunks):
        for key in ("input_ids", "position_ids"):
            samples = data.nested_samples(chunk.get(key))
            longest = max(range(len(samples)), key=lambda i: samples[i].shape[-1])
            samples[longest] = samples[longest][..., :-1]
            chunk.set(key, data.nested_from_samples(samples))
        out.append(chunk)
    return out


def flipping_chunker(td, chunks):
    """Rebuilds each chunk with torch's constructor, which may pick the component dim as ragged."""
    out = []
    for chunk in REAL_CHUNKER(td, chunks):
        for key in ("input_ids", "position_ids"):
            samples = data.nested_samples(chunk.get(key))
            chunk.set(key, torch.nested.as_nested_tensor(samples, layout=torch.jagged))
        out.append(chunk)
    return out


def no_max_seqlen_chunker(td, chunks):
    """Rebuilds each chunk from values and offsets but without max_seqlen."""
    out = []
    for chunk in REAL_CHUNKER(td, chunks):
        for key in ("input_ids", "position_ids"):
            nt = data.nested_samples(chunk.get(key))
            offsets = torch.tensor([0] + torch.tensor([s.shape[-1] for s in nt]).cumsum(0).tolist())
            chunk.set(key, torch.nested.nested_tensor_from_jagged(torch.cat(nt, dim=-1), offsets,
                                                                  jagged_dim=nt[0].dim()))
        out.append(chunk)
    return out


@pytest.mark.parametrize("broken, finding", [(truncating_chunker, "wrong:truncated"),
                                             (flipping_chunker, "wrong:ragged-dim"),
                                             (no_max_seqlen_chunker, "wrong:")])
def test_check_fails_on_a_broken_chunker(monkeypatch, tmp_path, broken, finding):
    monkeypatch.setattr(data, "chunk_tensordict", broken)
    res = nested_chunking.run(CheckOptions(work_dir=tmp_path))
    assert res.status is Status.FAIL
    failed = [v for v in res.verdicts if v.name.endswith("/trainer") and v.status is Status.FAIL]
    assert failed, res.message
    assert any(finding in outcome for v in failed for outcome in v.metrics.values())
    if broken is truncating_chunker:  # a truncation is visible in every family, and in the GRPO update's split
        assert len(failed) == len(FAMILIES) + 1 and any(v.name == "grpo-update/trainer" for v in failed)


def test_judges_work_by_values():
    samples = [torch.arange(6).reshape(3, 2), torch.arange(9).reshape(3, 3) + 10]
    values = torch.cat(samples, dim=-1)
    good = torch.nested.nested_tensor_from_jagged(values, torch.tensor([0, 2, 5]), jagged_dim=2, max_seqlen=3)
    assert judge_nested(good, samples, strict=True) == "ok"
    # The same samples with the component dim as the ragged one: unbind is right, the layout is not.
    equal = [torch.arange(6).reshape(3, 2), torch.arange(6).reshape(3, 2) + 10]
    flipped = torch.nested.nested_tensor_from_jagged(torch.cat(equal, dim=0), torch.tensor([0, 3, 6]))
    assert judge_nested(flipped, equal) == "wrong:ragged-dim"
    shorter = [samples[0], samples[1][:, :2]]
    truncated = torch.nested.nested_tensor_from_jagged(torch.cat(shorter, -1), torch.tensor([0, 2, 4]),
                                                       jagged_dim=2, max_seqlen=2)
    assert judge_nested(truncated, samples) == "wrong:truncated"
    assert judge_dense(torch.zeros(2, 3, 2), torch.zeros(2, 3, 3)) == "wrong:truncated"
    assert judge_dense(torch.full((2, 4), -1.0).index_fill_(1, torch.tensor([0]), 1.0),
                       torch.tensor([[1.0, -1.0], [1.0, -1.0]])) == "wrong:over-padded"
    assert judge_dense(torch.ones(2, 2), torch.zeros(2, 2)) == "wrong:values"


def test_grpo_update_verdict_passes_and_names_the_trainers_path(result):
    verdict = next(v for v in result.verdicts if v.name == "grpo-update/trainer")
    assert verdict.status is Status.PASS, verdict.message
    assert set(verdict.metrics.values()) == {"ok"}


def test_grpo_update_verdict_fails_when_the_update_stops_using_chunk_tensordict(monkeypatch):
    """A split that slices rows itself gives the right rows, but the family verdicts then judge a
    function the trainers no longer run: the verdict says so."""
    from harness.checks.nested_chunking import trainer_path
    from trainers.grpo import micro_batches

    def slicing_split(batch, advantages, mini, micro, old_logprobs=None, ref_logprobs=None):
        layout = micro_batches.Layout.of(batch)
        td = micro_batches.as_tensordict(batch, advantages, old_logprobs, ref_logprobs)
        sizes = data.split_sizes(int(td.batch_size[0]), mini * micro)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        flat = [micro_batches.padded(td[s:s + n], layout) for s, n in zip(starts, sizes)]
        return [flat[i * micro:(i + 1) * micro] for i in range(mini)]

    monkeypatch.setattr(micro_batches, "split", slicing_split)
    verdict = trainer_path.verdict()
    assert verdict.status is Status.FAIL and "not the trainers' path" in verdict.message


def test_grpo_update_verdict_fails_on_a_chunker_that_reorders_rows(monkeypatch):
    from harness.checks.nested_chunking import trainer_path

    monkeypatch.setattr(data, "chunk_tensordict", lambda td, chunks: REAL_CHUNKER(td, chunks)[::-1])
    verdict = trainer_path.verdict()
    assert verdict.status is Status.FAIL and "rejoined micro-batches differ in input_ids" in verdict.message


def _verl_row(monkeypatch, tmp_path, statuses):
    """The check in a stand-in verl row whose verl verdicts have `statuses` (no verl needed)."""
    from harness.checks.nested_chunking import verl_chain
    from harness.checks.support import verl
    from harness.results.records import Verdict

    monkeypatch.setattr(verl, "installed", lambda: "9.9.0")
    monkeypatch.setattr(verl_chain, "verdicts", lambda: [Verdict(f"verl:chunking/case{i}", status, "stand-in")
                                                          for i, status in enumerate(statuses)])
    return nested_chunking.run(CheckOptions(work_dir=tmp_path))


def test_a_verl_row_adds_verls_verdicts_and_one_that_fails_fails_the_check(monkeypatch, tmp_path):
    res = _verl_row(monkeypatch, tmp_path, [Status.PASS, Status.FAIL])
    assert [v.name for v in res.verdicts[-2:]] == ["verl:chunking/case0", "verl:chunking/case1"]
    assert res.status is Status.FAIL and res.message == "verl's own chunking fails in: verl:chunking/case1"
    assert res.metrics["verl_seconds"] is not None


def test_a_verl_row_whose_verdicts_pass_or_cannot_run_here_says_how_many_ran(monkeypatch, tmp_path):
    res = _verl_row(monkeypatch, tmp_path, [Status.PASS, Status.SKIP])
    assert res.status in (Status.PASS, Status.AFFECTED), res.message
    assert res.message.endswith("; verl's own chunking exact in 1 of 2 cases (the others could not run here)")
