"""nested-chunking in a row that installs verl: verl's own chunking of its batches, row by row (`verl:chunking/*`).

verl's trainer and FSDP engine move a rollout batch through these functions of the installed verl, each a stage:
  verl.workers.utils.padding.left_right_2_no_padding      the padded rollout to nested ids and position ids
  verl.protocol.BatchData.chunk                           the driver's split over the data-parallel workers
  ray.cloudpickle round trip                              what Ray does to each chunk on its way to a worker
  verl.utils.tensordict_utils.maybe_fix_3d_position_ids   the worker's repair of 3-D position ids
  verl.utils.tensordict_utils.make_iterator               mini-batches
  verl.workers.engine.utils.prepare_micro_batches         micro-batches: dynamic (token budget) and static sizes
  FSDPEngineWithLMHead.prepare_model_inputs               the model's inputs, packed and padded
  verl.workers.engine.utils.postprocess_batch_func        per-token outputs back in the mini-batch's order
Every row's values name it (ids 1000*row + t, positions 1000*row + 100*axis + t), so each stage is checked row by
row against the original, and the model's inputs against the rows' concatenation (packed) or padding (padded).
Cases: `jagged` (mRoPE (4, L_i) position ids), `equal-lengths` (every row as long as the others), `text-ids`
(2-D position ids). The `metadata` case is verl_metadata's. verl code that imports a package made only for an
accelerator is a skip that names verl's file and line (support/verl.unrunnable).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from harness.checks.support import verl
from harness.results.records import Status, Verdict

CASES = {
    "jagged": {"lengths": (5, 9, 3, 7, 6, 4, 8, 2), "mrope": True},
    "equal-lengths": {"lengths": (6,) * 8, "mrope": True},
    "text-ids": {"lengths": (5, 9, 3, 7, 6, 4, 8, 2), "mrope": False},
}
DP = 2  # data-parallel workers the driver chunks for
MINI = 2  # rows per mini-batch


class Wrong(Exception):
    """A stage gave a row, an input or an output that is not the original's."""


def functions() -> SimpleNamespace:
    """The verl functions the chain calls, looked up at call time (a test replaces one to break it)."""
    from verl.protocol import BatchData
    from verl.utils import tensordict_utils
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.engine.utils import postprocess_batch_func, prepare_micro_batches
    from verl.workers.utils.padding import left_right_2_no_padding

    return SimpleNamespace(unpad=left_right_2_no_padding, batch_data=BatchData, tu=tensordict_utils,
                           engine=FSDPEngineWithLMHead, micro=prepare_micro_batches, post=postprocess_batch_func)


def ran(fns: SimpleNamespace) -> list:
    return [fns.unpad, fns.batch_data.chunk, fns.tu.maybe_fix_3d_position_ids, fns.tu.make_iterator, fns.micro,
            fns.engine.prepare_model_inputs, fns.post]


def padded_rollout(lengths: tuple[int, ...], mrope: bool):
    """(right-padded rollout TensorDict, the rows as [(ids, position ids)]) whose values name their row."""
    import torch
    from tensordict import TensorDict

    count, width = len(lengths), max(lengths) + 2
    ids = torch.zeros(count, width, dtype=torch.long)
    mask = torch.zeros(count, width, dtype=torch.long)
    pos = torch.zeros((count, 4, width) if mrope else (count, width), dtype=torch.long)
    rows = []
    for row, length in enumerate(lengths):
        t = torch.arange(length)
        ids[row, :length] = 1000 * row + t
        mask[row, :length] = 1
        pos[row, ..., :length] = 1000 * row + (100 * torch.arange(4)[:, None] + t if mrope else t)
        rows.append((ids[row, :length].clone(), pos[row, ..., :length].clone()))
    batch = TensorDict({"input_ids": ids, "attention_mask": mask, "response_mask": mask.clone(), "position_ids": pos,
                        "row": torch.arange(count)}, batch_size=[count])
    return batch, rows


def _layout(tensor) -> str:
    return f"shape {tuple(tensor.shape)}, ragged_idx {getattr(tensor, '_ragged_idx', None)}"


def check_rows(batch, rows: list, stage: str) -> None:
    """Every row of `batch` (found by its row id) holds its original ids and position ids exactly."""
    import torch

    for index, row in enumerate(batch["row"].tolist()):
        try:
            got = (batch["input_ids"][index], batch["position_ids"][index])
        except Exception as exc:  # noqa: BLE001 - a row that cannot be read back is this stage's finding
            raise Wrong(f"{stage}: row {row} cannot be read back ({type(exc).__name__}); position_ids "
                        f"{_layout(batch['position_ids'])}") from None
        for key, have, want in zip(("input_ids", "position_ids"), got, rows[row]):
            if have.shape != want.shape or not torch.equal(have, want):
                raise Wrong(f"{stage}: row {row} {key} {tuple(have.shape)} is not the original {tuple(want.shape)}")


def expected_inputs(rows: list, order: list[int], packed: bool, mrope: bool):
    """(input_ids, position_ids) the model must get: the rows concatenated (packed) or zero-padded."""
    import torch

    if packed:
        pos = torch.cat([rows[r][1] for r in order], dim=-1)
        return torch.cat([rows[r][0] for r in order]).unsqueeze(0), pos.unsqueeze(1 if mrope else 0)
    width = max(len(rows[r][0]) for r in order)
    ids = torch.zeros(len(order), width, dtype=torch.long)
    pos = torch.zeros((4, len(order), width) if mrope else (len(order), width), dtype=torch.long)
    for i, r in enumerate(order):
        ids[i, :len(rows[r][0])] = rows[r][0]
        if mrope:
            pos[:, i, :len(rows[r][0])] = rows[r][1]
        else:
            pos[i, :len(rows[r][0])] = rows[r][1]
    return ids, pos


def bare_engine(engine_class):
    """verl's FSDP engine without a model: prepare_model_inputs reads only these attributes (as __init__ sets them
    for no sequence parallelism and no padding to a fixed length)."""
    engine = object.__new__(engine_class)
    engine.pad_to_length, engine.pad_to_length_bucket = False, None
    engine.ulysses_sequence_parallel_size, engine.use_ulysses_sp = 1, False
    engine.pass_packed_cu_seqlens = True
    engine.module = SimpleNamespace()
    return engine


def check_model_inputs(fns, engine, micro, rows: list, mrope: bool, stage: str) -> None:
    import torch

    order = micro["row"].tolist()
    for packed in (True, False):
        fns.tu.assign_non_tensor(micro, use_remove_padding=packed)
        inputs, _ = engine.prepare_model_inputs(micro)
        want_ids, want_pos = expected_inputs(rows, order, packed, mrope)
        label = f"{stage} prepare_model_inputs ({'packed' if packed else 'padded'})"
        for key, want in (("input_ids", want_ids), ("position_ids", want_pos)):
            have = inputs[key]
            if have.shape != want.shape or not torch.equal(have, want):
                raise Wrong(f"{label}: {key} {tuple(have.shape)} is not the rows' {tuple(want.shape)}")
        if packed:
            bounds = torch.tensor([0] + [len(rows[r][0]) for r in order]).cumsum(0)
            if not torch.equal(inputs["cu_seqlens"].to(bounds.dtype), bounds):
                raise Wrong(f"{label}: cu_seqlens {inputs['cu_seqlens'].tolist()} is not {bounds.tolist()}")


def run_chain(fns, lengths: tuple[int, ...], mrope: bool, evidence: dict[str, Any]) -> None:
    """The chain on one case's batch, its layouts recorded in `evidence`; raises Wrong at the first stage that
    loses a row."""
    import ray.cloudpickle as cloudpickle
    import torch

    batch, rows = padded_rollout(lengths, mrope)
    batch = fns.unpad(batch)
    evidence.update(nested_position_ids=_layout(batch["position_ids"]), after_pickle={}, micro_batches={})
    check_rows(batch, rows, "left_right_2_no_padding")
    engine = bare_engine(fns.engine)
    for dynamic in (True, False):
        mode = "dynamic-bsz" if dynamic else "static-bsz"
        for worker, chunk in enumerate(fns.batch_data(batch).chunk(DP)):
            check_rows(chunk, rows, f"{mode} BatchData.chunk[{worker}]")
            chunk = cloudpickle.loads(cloudpickle.dumps(chunk))  # Ray's transport
            evidence["after_pickle"][f"{mode}[{worker}]"] = _layout(chunk["position_ids"])
            fns.tu.maybe_fix_3d_position_ids(chunk)
            check_rows(chunk, rows, f"{mode} maybe_fix_3d_position_ids[{worker}]")
            for index, mini in enumerate(fns.tu.make_iterator(chunk, mini_batch_size=MINI, epochs=1, seed=worker)):
                stage = f"{mode} mini-batch[{worker}.{index}]"
                fns.tu.maybe_fix_3d_position_ids(mini)
                check_rows(mini, rows, stage)
                # the engine's settings as verl's training worker attaches them (non-tensor data)
                fns.tu.assign_non_tensor(mini, use_dynamic_bsz=dynamic, temperature=1.0, micro_batch_size_per_gpu=1,
                                         max_token_len_per_gpu=max(lengths) + 3)
                micros, indices = fns.micro(mini, dp_group=None, same_micro_num_in_dp=False)
                evidence["micro_batches"].setdefault(mode, []).append([len(m) for m in micros])
                outputs = []
                for k, micro in enumerate(micros):
                    check_rows(micro, rows, f"{stage} micro-batch[{k}]")
                    check_model_inputs(fns, engine, micro, rows, mrope, f"{stage} micro-batch[{k}]")
                    outputs.append({"model_output": {"echo": micro["input_ids"]}, "loss": 0.0, "metrics": {}})
                echo = fns.post(outputs, indices, mini)["model_output"]["echo"]
                for i, row in enumerate(mini["row"].tolist()):
                    if not torch.equal(echo[i], rows[row][0]):
                        raise Wrong(f"{stage} postprocess_batch_func: output {i} is not row {row}'s")


def case_verdict(name: str, lengths: tuple[int, ...], mrope: bool) -> Verdict:
    part, fns, evidence = f"chunking/{name}", None, {}
    try:
        fns = functions()
        run_chain(fns, lengths, mrope, evidence)
    except Wrong as exc:
        made = f" (left_right_2_no_padding made position_ids {evidence['nested_position_ids']})"
        return verl.verdict(part, Status.FAIL, f"verl's chunking loses a row: {exc}{made}", ran(fns), evidence)
    except Exception as exc:  # noqa: BLE001 - verl's code raising on this stack is its outcome here
        recorded = ran(fns) if fns else []
        why = verl.unrunnable(exc)
        if why:
            return verl.verdict(part, Status.SKIP, why, recorded)
        return verl.verdict(part, Status.FAIL, f"verl's chunking raises {verl.describe(exc)}", recorded, evidence,
                            raised=exc)
    return verl.verdict(part, Status.PASS, f"every row intact through verl's chain ({len(lengths)} rows, {DP} "
                        "workers, dynamic and static micro-batches, packed and padded model inputs)", ran(fns),
                        evidence)


def verdicts() -> list[Verdict]:
    from harness.checks.nested_chunking import verl_metadata

    return [case_verdict(name, **spec) for name, spec in CASES.items()] + [verl_metadata.verdict()]
