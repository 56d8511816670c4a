"""The `verl:chunking/metadata` verdict: verl's non-tensor data through its chunk and its concat.

verl keeps settings and results as non-tensor data beside a batch's tensors (tensordict's NonTensorData: the
trainer's `temperature` or `max_response_len`, a worker's `metrics`) and per-row labels as a NonTensorStack. Two
trips, each through the installed verl's functions:
- to the workers: a batch made by `tensordict_utils.get_tensordict`, split by `BatchData.chunk` and pickled as Ray
  sends it; every chunk must hold each setting as the one value it was, and its rows' labels and ids;
- back to the driver: each data-parallel rank's output (per-token log-probs, and the rank's own `metrics` dict, as
  verl's training worker makes its output) joined by `BatchData.concat` (what verl's dispatch does to collect the
  ranks' outputs); the log-probs must come back in row order and `tensordict_utils.get(output, "metrics")` must be
  one dict, as verl's trainer reads it (`tu.get(output, "metrics")["mfu"]` after compute_log_prob).
A tensordict that stacks the ranks' different values into a list breaks that read: measured with tensordict 0.15.3
(outside verl 0.9's declared range), where verl's own test_protocol_v2 fails on the same concatenation.
"""
from __future__ import annotations

from collections.abc import Mapping

from harness.checks.support import verl
from harness.results.records import Status, Verdict

PART = "chunking/metadata"
LENGTHS = (5, 9, 3, 7, 6, 4, 8, 2)
SETTINGS = {"temperature": 0.7, "max_response_len": 2048, "pad_mode": "no_padding"}
DP = 2


class Wrong(Exception):
    """A value that did not survive the trip."""


def _rows_batch(tu):
    import torch

    ids = [1000 * row + torch.arange(n) for row, n in enumerate(LENGTHS)]
    tensors = {"row": torch.arange(len(LENGTHS)), "input_ids": torch.nested.as_nested_tensor(ids, layout=torch.jagged),
               "labels": [f"row-{row}" for row in range(len(LENGTHS))]}
    return tu.get_tensordict(tensors, non_tensor_dict=dict(SETTINGS)), ids


def to_workers(batch_data, tu, batch, ids) -> None:
    import ray.cloudpickle as cloudpickle
    import torch

    for worker, chunk in enumerate(batch_data(batch).chunk(DP)):
        chunk = cloudpickle.loads(cloudpickle.dumps(chunk))
        for key, value in SETTINGS.items():
            have = tu.get(chunk, key)
            if have != value:
                raise Wrong(f"BatchData.chunk[{worker}]: setting {key} is {have!r}, not {value!r}")
        rows = chunk["row"].tolist()
        labels = list(tu.get(chunk, "labels"))
        if labels != [f"row-{row}" for row in rows]:
            raise Wrong(f"BatchData.chunk[{worker}]: labels {labels} are not those of rows {rows}")
        for index, row in enumerate(rows):
            if not torch.equal(chunk["input_ids"][index], ids[row]):
                raise Wrong(f"BatchData.chunk[{worker}]: row {row}'s input_ids are not the original")


def from_workers(batch_data, tu) -> str:
    """Each rank's output joined as verl collects them; returns what `metrics` reads back as."""
    import torch

    outputs, expected = [], []
    for rank in range(DP):
        rows = [torch.full((n,), float(rank * 100 + i)) for i, n in enumerate(LENGTHS[rank::DP])]
        expected += rows
        outputs.append(tu.get_tensordict({"log_probs": torch.nested.as_nested_tensor(rows, layout=torch.jagged)},
                                         non_tensor_dict={"metrics": {"mfu": 0.1 * (rank + 1), "rank": rank}}))
    merged = batch_data(outputs).concat()
    joined = merged["log_probs"]
    for index, want in enumerate(expected):
        if not torch.equal(joined[index], want):
            raise Wrong(f"BatchData.concat: output row {index} is not rank output row {index}")
    metrics = tu.get(merged, "metrics")
    if not isinstance(metrics, Mapping) or "mfu" not in metrics:
        shown = f"a {type(metrics).__name__} of {len(metrics)}" if isinstance(metrics, list) else repr(metrics)[:80]
        raise Wrong(f"BatchData.concat: the ranks' metrics read back as {shown}, not one dict: verl's trainer reads "
                    "tu.get(output, 'metrics')['mfu'] from it")
    return f"rank {metrics.get('rank')}'s metrics dict"


def verdict() -> Verdict:
    ran: list = []
    try:
        from verl.protocol import BatchData
        from verl.utils import tensordict_utils as tu

        ran = [tu.get_tensordict, BatchData.chunk, BatchData.concat, tu.get]
        batch, ids = _rows_batch(tu)
        to_workers(BatchData, tu, batch, ids)
        kept = from_workers(BatchData, tu)
    except Wrong as exc:
        return verl.verdict(PART, Status.FAIL, f"verl's non-tensor data does not survive its chunk and concat: {exc}",
                            ran)
    except Exception as exc:  # noqa: BLE001 - verl's code raising on this stack is its outcome here
        return verl.verdict(PART, Status.FAIL, f"verl's chunk and concat raise {verl.describe(exc)}",
                            ran, raised=exc)
    return verl.verdict(PART, Status.PASS, f"settings and labels intact in every chunk; the ranks' outputs joined in "
                        f"row order, metrics read back as one dict ({kept})", ran)
