"""harness.benchmarks.plan_verdicts: the launch-plans verdicts a matrix bench keeps for docs/launch-plans.md, one
cell per megatron-core release (the newest transformers), as the check recorded them."""
import json

from harness.benchmarks import plan_verdicts
from harness.results.records import CellResult, CheckResult, Status, Verdict


def write(folder, cell_id, axes, verdicts=None, check=plan_verdicts.CHECK):
    checks = [] if verdicts is None else [CheckResult(check, Status.PASS, "", verdicts=verdicts)]
    cell = CellResult(matrix="cpu", cell_id=cell_id, axes=axes, checks=checks)
    (folder / f"{cell_id}.json").write_text(json.dumps(cell.to_dict()), encoding="utf-8")


def test_one_cell_per_release_the_newest_transformers_with_each_verdict(tmp_path):
    start = Verdict("big-plan", Status.PASS, "would start", metrics={"memory_gib": {"total": 55.65}})
    refused = Verdict("big-plan", Status.FAIL, "parallel.pp: refused")
    write(tmp_path, "old-tf", {"megatron_core": "0.16.1", "transformers": "5.9.0"}, [refused])
    write(tmp_path, "new-tf", {"megatron_core": "0.16.1", "transformers": "5.23.0"}, [start])
    write(tmp_path, "other", {"megatron_core": "0.19.2", "transformers": "5.12.1"}, [refused])
    write(tmp_path, "fsdp", {"transformers": "5.23.0"}, [start])  # no megatron-core: not a column
    write(tmp_path, "no-check", {"megatron_core": "0.18.0", "transformers": "5.23.0"})
    write(tmp_path, "other-check", {"megatron_core": "0.17.0", "transformers": "5.23.0"}, [start], check="x")
    kept = plan_verdicts.from_cells(tmp_path)
    assert sorted(kept) == ["0.16.1", "0.19.2"]
    assert kept["0.16.1"]["cell"] == "new-tf" and kept["0.16.1"]["transformers"] == "5.23.0"
    assert kept["0.16.1"]["verdicts"] == {"big-plan": {"status": "pass", "message": "would start",
                                                       "memory_gib": 55.65}}
    assert kept["0.19.2"]["verdicts"]["big-plan"] == {"status": "fail", "message": "parallel.pp: refused",
                                                      "memory_gib": None}
