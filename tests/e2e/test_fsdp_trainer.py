"""The FSDP2 GRPO trainer: options cascade, 2 ranks on CPU with and without offload, rank
consistency, agreement with a one-rank run, and a short run that raises the reward."""
import math
import subprocess
import sys

import pytest

from trainers.fsdp.config import TrainConfig, resolve
from trainers.grpo.metrics import STEP_KEYS, read_metrics

pytest.importorskip("torch")


def test_config_cascade(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('lr = 0.01\ngroup-size = 4\nloss_agg = "seq-mean-token-mean"\n')
    config = resolve(["--config", str(path), "--lr", "0.02", "--offload"])
    assert (config.lr, config.group_size, config.loss_agg, config.offload) == (0.02, 4, "seq-mean-token-mean", True)
    assert resolve([]).to_dict() == TrainConfig().to_dict()
    path.write_text('{"learning_rate": 1}')
    path = path.rename(tmp_path / "run.json")
    with pytest.raises(ValueError, match="learning_rate"):
        resolve(["--config", str(path)])
    with pytest.raises(ValueError):
        resolve(["--kl-estimator", "k2"])


def _train(tmp_path, name, *args, nproc=2, steps=3):
    metrics = tmp_path / f"{name}.jsonl"
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
                if nproc > 1 else [sys.executable])
    command = [*launcher, "-m", "trainers.fsdp", "--steps", str(steps), "--device", "cpu",
               "--metrics", str(metrics), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return metrics


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    return {"plain": _train(tmp, "plain", "--metrics-all-ranks"),
            "offload": _train(tmp, "offload", "--model", "moe", "--offload", "--kl-coef", "0.1",
                              "--mini-batches", "2")}


@pytest.mark.slow
def test_two_ranks_write_finite_consistent_metrics(runs):
    rank0, rank1 = read_metrics(runs["plain"]), read_metrics(runs["plain"].with_name("plain.jsonl.rank1"))
    assert [r["step"] for r in rank0] == [0, 1, 2]
    for record in rank0:
        assert set(STEP_KEYS) <= set(record) and record["world_size"] == 2
        assert all(math.isfinite(record[k]) for k in STEP_KEYS)
        assert record["logprob_diff_max"] < 1e-4  # engine and trainer agree before the update
    for a, b in zip(rank0, rank1):  # reduced metrics are the same on every rank
        for key in ("reward_mean", "loss", "grad_norm", "entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12)


@pytest.mark.slow
def test_moe_with_offload_kl_and_mini_batches_trains(runs):
    records = read_metrics(runs["offload"])
    assert len(records) == 3 and all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in records)
    assert records[0]["updates"] == 2
    # the reference starts equal to the policy (only the second mini-batch sees a moved policy),
    # then the policy moves away from it
    assert 0.0 <= records[0]["kl"] < records[-1]["kl"]


@pytest.mark.slow
def test_one_rank_run_matches_two_ranks(tmp_path, runs):
    # Samples depend on row seeds, not on the sharding, and the loss is normalised globally:
    # one rank and two ranks follow the same trajectory up to float reduction order.
    one = read_metrics(_train(tmp_path, "one", nproc=1))
    two = read_metrics(runs["plain"])
    assert one[0]["world_size"] == 1
    assert [r["reward_mean"] for r in one] == [r["reward_mean"] for r in two]
    for a, b in zip(one, two):
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_one_rank_is_unsharded_by_default_and_matches_fsdp2(tmp_path, runs):
    # One rank has nothing to shard: the default keeps a plain module, `--shard always` wraps it
    # in FSDP2 anyway; both follow the same trajectory. Two ranks always shard.
    plain = read_metrics(_train(tmp_path, "one-plain", nproc=1))
    sharded = read_metrics(_train(tmp_path, "one-sharded", "--shard", "always", nproc=1))
    assert [r["sharded"] for r in plain] == [False] * 3 and [r["sharded"] for r in sharded] == [True] * 3
    assert all(r["sharded"] for r in read_metrics(runs["plain"]))
    assert [r["reward_mean"] for r in plain] == [r["reward_mean"] for r in sharded]
    for a, b in zip(plain, sharded):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)


# A short run raising the reward is tested by tests/e2e/test_grpo_convergence_runs.py (real 2-rank run).


@pytest.mark.slow
def test_vision_language_model_trains_on_text_prompts(tmp_path):
    records = read_metrics(_train(tmp_path, "vl", "--model", "vl", nproc=1, steps=2))
    assert len(records) == 2 and all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in records)


def test_a_relaunched_two_rank_run_keeps_the_trainers_exit_status_and_one_line(tmp_path):
    """`--nproc-per-node 2` runs under torchrun, which itself ends with 1: the launcher hands back the ranks'
    own status (4: a non-finite loss) and their shared line once, not once per rank."""
    command = [sys.executable, "-m", "trainers.fsdp", "--nproc-per-node", "2", "--lr", "1e30", "--steps", "4",
               "--batch-prompts", "2", "--group-size", "2", "--device", "cpu", "--metrics", str(tmp_path / "m.jsonl")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 4, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: training stopped at step "), lines
