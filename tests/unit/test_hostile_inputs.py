"""Hostile input to the verbs, as a new user types it: one row per way in, with what it must give. A refusal is one
line naming what was wrong and where, with its documented exit status; nothing already written is lost or
redirected, and no figure a machine did not measure is kept.

Each row's `run` does it (in this process: the verbs are called as `python -m harness` calls them) and returns
(exit status, what was said); `after` checks what must hold afterwards. Rows that are no command (the measured
page, a plan's findings, the Ray driver, the docs) return 0 and what they show."""
from __future__ import annotations

import io
import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_index import FakeIndex
from fake_ray import FakeRay
from plan_helpers import write_plan
from wheel_helpers import offline_index, wheel, wheelhouse_manifest

from harness import cli, matrix
from harness.benchmarks import suite
from harness.docsgen import figures as measured_page
from harness.docsgen import tables
from harness.execution import check_process, ray_dispatch
from harness.execution.cell import RunOptions
from harness.execution.jobs import Progress
from harness.plans import megatron_probe, rules
from harness.plans.plan_format import load_plan

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Hostile:
    id: str
    run: Callable  # (Context) -> (status, said)
    status: int
    says: str
    after: Callable | None = None  # (Context) -> None: what must hold afterwards


class Context:
    def __init__(self, tmp: Path, monkeypatch, capsys):
        self.tmp, self.monkeypatch, self.capsys = tmp, monkeypatch, capsys

    def harness(self, *argv) -> tuple[int, str]:
        status = cli.main([str(a) for a in argv])
        return status, self.capsys.readouterr().err

    def bench(self, *argv) -> tuple[int, str]:
        status = suite.main([str(a) for a in argv])
        return status, self.capsys.readouterr().err


# --- `python -m harness.benchmarks --from-evidence`: a figures file and a record from the box -----------------------

FIGURES = '{\n "report": {"render_cpu_s": 1.5}\n}\n'
CONFLICTED = '<<<<<<< HEAD\n' + FIGURES + '=======\n{"report": {}}\n>>>>>>> theirs\n'


def _record(ctx: Context, record, raw: bytes | None = None) -> Path:
    folder = ctx.tmp / "evidence" / "benchmarks"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "grpo-vs-trl.json").write_bytes(raw if raw is not None else json.dumps(record).encode())
    return ctx.tmp / "evidence"


def _measured(device="cuda", **summary) -> dict:
    """A record as the box writes it, its summary figures replaced by `summary`."""
    figures = {"date": "2026-12-01", "summary": {"seconds_to_threshold": {"ours": 1.0, "trl": 3.0},
                                                 "speedup_to_threshold": 3.0, **summary},
               "device": {"type": device, "devices": ["NVIDIA H200"], "driver": "580.1", "torch": "2.11.0"}}
    return {"benchmark": "grpo-vs-trl", "device": device, "status": "measured", "figures": figures}


def _from_evidence(record=None, raw: bytes | None = None, figures: bytes | None = FIGURES.encode(), out=None):
    def run(ctx: Context):
        target = ctx.tmp / "figures.json"
        if figures is not None:
            target.write_bytes(figures)
        return ctx.bench("--from-evidence", _record(ctx, record, raw), "--out", out(ctx) if out else target)
    return run


def _figures_untouched(content: bytes = FIGURES.encode()):
    def after(ctx: Context):
        assert (ctx.tmp / "figures.json").read_bytes() == content
    return after


def _string_figure_on_the_page(ctx: Context):
    page = measured_page.measured_table({"grpo_vs_trl_evidence": {
        "summary": {"seconds_to_threshold": {"ours": "fast", "trl": math.nan}, "speedup_to_threshold": -3.0},
        "machine": "NVIDIA H200", "date": "2026-12-01"}})
    return 0, page


# --- pre-flight: a row's pins and its recipe's exclude, resolved against a folder of wheels -------------------------

PREFLIGHT = """
[matrix]
name = "mini"
checks = ["stack-smoke"]

[axes]
torch = ["9.0.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cuda"]

[[include]]
model = "vl"
requirements = ["{extra}"]
install = {{ exclude = [{exclude}] }}
"""


def _preflight(extra: str = "aaa==1.0", exclude: str = '"bbb"', torch: str = "9.0.0", out=None, cache=None):
    def run(ctx: Context):
        links = ctx.tmp / "links"
        links.mkdir(exist_ok=True)
        wheel(links, "aaa", "1.0", requires=("bbb",))
        wheel(links, "bbb", "1.0")
        wheel(links, "torch", "9.0.0")
        offline_index(ctx.monkeypatch, links)
        path = ctx.tmp / "m.toml"
        path.write_text(PREFLIGHT.format(extra=extra, exclude=exclude).replace('"9.0.0"', f'"{torch}"'))
        return ctx.harness("preflight", path, "--python", "3.11", "--out", out(ctx) if out else ctx.tmp / "out",
                           "--cache", cache(ctx) if cache else ctx.tmp / "cache")
    return run


def _nothing_written(ctx: Context):
    assert not (ctx.tmp / "out").exists()


def _a_file(name: str):
    def make(ctx: Context) -> Path:
        (ctx.tmp / name).write_text("precious\n")
        return ctx.tmp / name
    return make


def _file_kept(name: str):
    def after(ctx: Context):
        assert (ctx.tmp / name).read_text() == "precious\n"
    return after


# --- matrices -------------------------------------------------------------------------------------------------------

SMALL = """
[matrix]
name = "s"
checks = ["stack-smoke"]
{extra}
[axes]
transformers = ["5.23.0"]
torch = ["2.13.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
"""


def _matrix_list(extra: str = "", tail: str = ""):
    def run(ctx: Context):
        path = ctx.tmp / "m.toml"
        path.write_text(SMALL.format(extra=extra) + tail)
        return ctx.harness("matrix", "list", path)
    return run


BY_RECIPE = """
[[include]]
vllm = "0.18.0"
torch = "as-pinned-by-vllm"
install = { remove = ["torchaudio"] }

[[include]]
vllm = "0.18.0"
torch = "as-pinned-by-vllm"
install = { remove = ["torchcodec"] }
"""

# --- `matrix watch --write`: a local index with one release newer than the matrix names ----------------------------

WATCHED = SMALL.format(extra="").replace('transformers = ["5.23.0"]', 'transformers = ["5.19.1", "5.23.0"]')


def _watch(target: str = "new.toml", matrix_name: str = "m.toml", new_release: bool = True, plant=None):
    def run(ctx: Context):
        fake = FakeIndex(ctx.tmp / "index")
        for version in ("5.19.1", "5.23.0", *(("5.24.0",) if new_release else ())):
            fake.add("transformers", version)
        fake.add("torch", "2.13.0")
        (ctx.tmp / "links").mkdir()
        (ctx.tmp / "none.txt").write_text("")
        for name, value in (("HARNESS_INDEX_URL", fake.url), ("UV_FIND_LINKS", str(ctx.tmp / "links")),
                            ("UV_CONSTRAINT", str(ctx.tmp / "none.txt")),
                            ("HARNESS_METADATA_CACHE", str(ctx.tmp / "cache"))):
            ctx.monkeypatch.setenv(name, value)
        (ctx.tmp / matrix_name).write_text(WATCHED)
        if plant:
            plant(ctx)
        return ctx.harness("matrix", "watch", ctx.tmp / matrix_name, "--write", ctx.tmp / target)
    return run


def _plant_link(ctx: Context):
    (ctx.tmp / "victim.txt").write_text("precious\n")
    (ctx.tmp / "new.toml.tmp").symlink_to(ctx.tmp / "victim.txt")


def _watched_and_victim_kept(ctx: Context):
    assert (ctx.tmp / "victim.txt").read_text() == "precious\n"
    assert matrix.load(ctx.tmp / "new.toml").cells  # written in its own place, a matrix that runs


def _matrix_kept(ctx: Context):
    assert (ctx.tmp / "x.toml.tmp").read_text() == WATCHED  # the matrix watched is not consumed
    assert matrix.load(ctx.tmp / "x.toml").cells


def _read_only(ctx: Context):
    (ctx.tmp / "new.toml").write_text("# an earlier review\n")
    (ctx.tmp / "new.toml").chmod(0o444)


def _still_read_only(ctx: Context):
    assert (ctx.tmp / "new.toml").stat().st_mode & 0o777 == 0o444
    assert "[[include]]" in (ctx.tmp / "new.toml").read_text()


def _not_written(ctx: Context):
    assert not (ctx.tmp / "new.toml").exists()


# --- the offline box: a wheelhouse and its manifest, checked with `run --here --dry-run` --------------------------

BOX = """
[matrix]
name = "box"
checks = ["stack-smoke"]
offline = true
python = "3.11"

[axes]
transformers = ["5.3.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
"""
ROW = "fsdp-text-tf5.3.0"


def _box(change=None, extra_wheel: bool = False, have: str = "transformers==5.2.0\n"):
    def run(ctx: Context):
        folder = ctx.tmp / "wh"
        folder.mkdir()
        wheel(folder, "transformers", "5.3.0")
        offline_index(ctx.monkeypatch, folder)
        wheelhouse_manifest(folder, {ROW: ["transformers==5.3.0"]}, "3.11")
        if extra_wheel:  # the same release for another platform, unhashed, beside the manifest's
            wheel(folder, "transformers", "5.3.0", tag="cp311-cp311-manylinux_2_28_x86_64")
        if change:
            data = json.loads((folder / "wheelhouse.json").read_text())
            change(data)
            (folder / "wheelhouse.json").write_text(json.dumps(data))
        (ctx.tmp / "box.toml").write_text(BOX)
        (ctx.tmp / "have.txt").write_text(have)
        return ctx.harness("run", ctx.tmp / "box.toml", "--here", "--wheelhouse", folder, "--have",
                           ctx.tmp / "have.txt", "--dry-run")
    return run


def _set(path: tuple, value):
    def change(data: dict):
        *path_to, last = path
        for part in path_to:
            data = data[part]
        data[last] = value
    return change


# --- launch plans -----------------------------------------------------------------------------------------------------

def _plan_findings(field: str, **changes):
    """The findings of the plan's field without megatron-core: the rules as arithmetic."""
    def run(ctx: Context):
        ctx.monkeypatch.setattr(megatron_probe, "version", lambda: None)
        found = [f for f in rules.check(load_plan(write_plan(ctx.tmp, **changes))) if f.field == field]
        return 0, "\n".join(f.line() for f in found)
    return run


def _plan_verb(**changes):
    def run(ctx: Context):
        return ctx.harness("plan", write_plan(ctx.tmp, **changes))
    return run


# --- the Ray driver, with a stand-in for Ray -------------------------------------------------------------------------

def _on_ray(lose: int, retries: int):
    def run(ctx: Context):
        fake = FakeRay(lose=lose, seconds=10.0)
        ctx.monkeypatch.setattr(ray_dispatch, "import_ray", lambda: fake)
        ctx.monkeypatch.setattr(ray_dispatch, "run_cell", fake.run_cell)
        path = ctx.tmp / "m.toml"
        path.write_text(SMALL.format(extra=""))
        m = matrix.load(path)
        stream = io.StringIO()
        opts = RunOptions(out_dir=ctx.tmp / "out", retries=retries, progress=Progress(1, stream, interactive=False))
        ray_dispatch.run_on_ray(m, m.cells, opts, "auto")
        record = json.loads(next((ctx.tmp / "out" / "cells").glob("*.json")).read_text())
        return 0, json.dumps(record) + "\n" + stream.getvalue()
    return run


def _crash_record_keeps_what_the_try_left(ctx: Context):
    record = json.loads(next((ctx.tmp / "out" / "cells").glob("*.json")).read_text())
    (check,) = record["checks"]
    assert check["status"] == "crash" and check["failure_class"] == "infra"
    assert record["lock"].endswith("lock.txt") and (ctx.tmp / "out" / record["lock"]).is_file()
    assert record["setup_log"].endswith("setup.log") and record["started"]
    assert check["log"].endswith("stack-smoke.log")  # the check it was running when the node died


def _retried_cell_records_its_try(ctx: Context):
    record = json.loads(next((ctx.tmp / "out" / "cells").glob("*.json")).read_text())
    (check,) = record["checks"]
    assert check["status"] == "pass" and check["flaky"]
    assert [a["failure_class"] for a in check["attempts"]] == ["infra"] and "died" in check["attempts"][0]["reason"]


# --- small things -----------------------------------------------------------------------------------------------------

def _bridge_parity_max_ranks_0(ctx: Context):
    scratch = ctx.tmp / "scratch"
    scratch.mkdir()
    ctx.monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    status = check_process.main(["bridge-parity", "--backend", "megatron", "--max-ranks", "0"])
    return status, ctx.capsys.readouterr().err


def _no_temporary_folder_left(ctx: Context):
    assert list((ctx.tmp / "scratch").iterdir()) == []


def _exit_status_table(ctx: Context):
    return 0, tables.exit_status_table()


def _runners_page(ctx: Context):
    return 0, (ROOT / "docs" / "runners.md").read_text(encoding="utf-8")


CASES = [
    # --from-evidence
    Hostile("figures file with merge-conflict markers", _from_evidence(_measured(), figures=CONFLICTED.encode()), 2,
            "the figures file is not JSON", _figures_untouched(CONFLICTED.encode())),
    Hostile("figures file not UTF-8", _from_evidence(_measured(), figures=b'{"r": "\xff\xfe"}'), 2,
            "the figures file is not UTF-8", _figures_untouched(b'{"r": "\xff\xfe"}')),
    Hostile("record without a device", _from_evidence({**_measured(), "device": None}), 2,
            "names no device, not on an accelerator", _figures_untouched()),
    Hostile("record measured on 'CPU'", _from_evidence(_measured(device="CPU")), 2,
            "measured on 'CPU', not on an accelerator", _figures_untouched()),
    Hostile("figures from another device than the record names",
            _from_evidence({**_measured(device="cpu"), "device": "cuda"}), 2,
            "figures.device.type is 'cpu', the record says cuda", _figures_untouched()),
    Hostile("a NaN figure", _from_evidence(raw=json.dumps(_measured(speedup_to_threshold=math.nan)).encode()), 2,
            "not JSON (NaN is not a JSON number)", _figures_untouched()),
    Hostile("an infinite figure", _from_evidence(raw=json.dumps(_measured(steps_per_second={"ours": math.inf}))
                                                 .encode()), 2, "Infinity is not a JSON number",
            _figures_untouched()),
    Hostile("a negative figure", _from_evidence(_measured(speedup_to_threshold=-3.0)), 2,
            "figures.summary.speedup_to_threshold: expected a number above 0 (or null), got -3.0",
            _figures_untouched()),
    Hostile("a string figure", _from_evidence(_measured(speedup_to_threshold="3x")), 2,
            "figures.summary.speedup_to_threshold: expected a number above 0", _figures_untouched()),
    Hostile("a string figure on the measured page", _string_figure_on_the_page, 0,
            "ours: unusable (not a finite number of at least 0); TRL: unusable"),
    Hostile("a record that is a list", _from_evidence([1, 2]), 2, "expected a JSON object (a benchmark record), got "
            "a list", _figures_untouched()),
    Hostile("a record whose figures are a string", _from_evidence({**_measured(), "figures": "fast"}), 2,
            "figures: expected an object of figures", _figures_untouched()),
    Hostile("a record not UTF-8", _from_evidence(raw=b"\x89PNG\r\n"), 2, "the benchmark record is not UTF-8",
            _figures_untouched()),
    Hostile("devices a string", _from_evidence({**_measured(), "figures": {**_measured()["figures"], "device": {
        "type": "cuda", "devices": "NVIDIA H200"}}}), 2, "figures.device.devices: expected a list of device names",
            _figures_untouched()),
    Hostile("--from-evidence --out a directory", _from_evidence(_measured(), out=lambda ctx: ctx.tmp), 2,
            "--out", None),
    # pre-flight
    Hostile("exclude a pinned distribution", _preflight(exclude='"torch"'), 2,
            "include[0].install.exclude: 'torch' is pinned by the row", _nothing_written),
    Hostile("exclude every pin", _preflight(exclude='"torch", "aaa"'), 2, "is pinned by the row", _nothing_written),
    Hostile("exclude a misspelt name", _preflight(exclude='"bbc"'), 2,
            "install.exclude: 'bbc' is required by none of the row's packages", _nothing_written),
    Hostile("a release that does not exist", _preflight(torch="99999.0.0"), 2, "torch 99999.0.0 does not exist",
            _nothing_written),
    Hostile("an extra pin that does not exist", _preflight(extra="aaa==99.99.99"), 2, "aaa 99.99.99 does not exist",
            _nothing_written),
    Hostile("preflight --out a file", _preflight(out=_a_file("out.txt")), 2, "--out", _file_kept("out.txt")),
    Hostile("preflight --cache a file", _preflight(cache=_a_file("cache.txt")), 2, "--cache",
            _file_kept("cache.txt")),
    # matrix keys
    Hostile("[matrix] timeout = nan", _matrix_list("timeout = nan"), 2, "matrix.timeout: expected seconds above 0"),
    Hostile("[matrix] timeout = inf", _matrix_list("timeout = inf"), 2, "matrix.timeout: expected seconds above 0"),
    Hostile("[matrix] timeout of a century", _matrix_list("timeout = 3.2e9"), 2, "at most a week"),
    Hostile("[matrix] memory_limit_mb beyond any address space", _matrix_list("memory_limit_mb = 9223372036854775807"),
            2, "matrix.memory_limit_mb: expected a whole number of MiB from 256"),
    Hostile("includes that differ only by install recipe", _matrix_list(tail=BY_RECIPE), 2,
            "vllm0.18.0 (torch as pinned by vllm) is also made by include[0] (line 13) with another install recipe"),
    # matrix watch --write
    Hostile("a link planted at FILE.tmp", _watch(plant=_plant_link), 0, "", _watched_and_victim_kept),
    Hostile("watching x.toml.tmp with --write x.toml", _watch(target="x.toml", matrix_name="x.toml.tmp"), 0, "",
            _matrix_kept),
    Hostile("a read-only --write target", _watch(plant=_read_only), 0, "", _still_read_only),
    Hostile("no new release", _watch(new_release=False), 0, "no cell to add; nothing written", _not_written),
    # the offline box
    Hostile("a second, unhashed wheel of the same release", _box(extra_wheel=True), 2,
            "transformers-5.3.0-cp311-cp311-manylinux_2_28_x86_64.whl not in its wheelhouse.json"),
    Hostile("manifest target {}", _box(_set(("target",), {})), 2, "wheelhouse.json: target.platform: expected"),
    Hostile("manifest platform x", _box(_set(("target", "platform"), "x")), 2, "target.platform: expected x86_64-"),
    Hostile("manifest limit_bytes abc", _box(_set(("limit_bytes",), "abc")), 2, "limit_bytes: expected a number"),
    Hostile("manifest files 5", _box(_set(("files",), 5)), 2, "files: expected a list of wheel entries"),
    Hostile("manifest add a string", _box(_set(("cells", ROW, "add"), "transformers==5.3.0")), 2,
            f"cells.{ROW}.add: expected a list of name==version pins"),
    Hostile("manifest add a pin without its version", _box(_set(("cells", ROW, "add"), ["transformers"])), 2,
            f"cells.{ROW}.add: expected name==version pins, got \"transformers\""),
    Hostile("manifest from_interpreter []", _box(_set(("cells", ROW, "from_interpreter"), [])), 2,
            "from_interpreter: expected an object"),
    Hostile("manifest benchmarks []", _box(_set(("benchmarks",), [])), 2, "benchmarks: expected an object"),
    Hostile("manifest file ../../../etc/passwd", _box(_set(("files", 0, "file"), "../../../etc/passwd")), 2,
            "files[0].file: expected the name of a wheel in the folder"),
    Hostile("manifest target.python not a version", _box(_set(("target", "python"), "snake")), 2,
            "wheelhouse.json: target.python: expected a Python version"),
    Hostile("a garbage --have line", _box(have="transformers==5.2.0\n%%% garbage ===\n"), 2,
            "have.txt, line 2: '%%% garbage ===' is not a name==version line"),
    Hostile("wheelhouse --out a file", lambda ctx: ctx.harness(
        "wheelhouse", ROOT / "matrices" / "gpu-evidence.toml", "--have", ROOT / "matrices" / "gpu-evidence.box.txt",
        "--out", _a_file("wh.txt")(ctx)), 2, "--out", _file_kept("wh.txt")),
    # launch plans
    Hostile("rollout.engine bogus", _plan_verb(rollout__engine="bogus"), 2,
            "rollout.engine: expected one of none, vllm, got 'bogus'"),
    Hostile("first_stage_layers = 1000", _plan_findings("parallel.first_stage_layers",
                                                        parallel__first_stage_layers=1000,
                                                        parallel__last_stage_layers=1000), 0,
            "fail      parallel.first_stage_layers: the uneven stages take 2000 layers, more than the model's 48"),
    Hostile("ep = 64 on 16 ranks per stage", _plan_findings("parallel.ep", parallel__ep=64), 0,
            "fail      parallel.ep: ep*etp = 64 does not divide the 16 ranks of a pipeline stage"),
    # the Ray driver
    Hostile("a node death with no retries left", _on_ray(lose=1, retries=0), 0, '"status": "crash"',
            _crash_record_keeps_what_the_try_left),
    Hostile("a cell Ray ran again", _on_ray(lose=1, retries=1), 0, '"flaky": true', _retried_cell_records_its_try),
    Hostile("a cell's time on the progress line", _on_ray(lose=0, retries=0), 0, "(cell 10 s, "),
    Hostile("a Ray auth token in the home folder", _runners_page, 0, "RAY_AUTH_MODE=token"),
    # small things
    Hostile("check bridge-parity --max-ranks 0", _bridge_parity_max_ranks_0, 2, "--max-ranks: expected a whole number",
            _no_temporary_folder_left),
    Hostile("check and repro exit 1 on a failing check", _exit_status_table, 0,
            "|        1 | check failed"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ctx = Context(tmp_path, monkeypatch, capsys)
    status, said = case.run(ctx)
    assert status == case.status, said
    assert case.says in said, said
    if status != 0:
        assert said.startswith("error: ") and said.strip().count("\n") == 0, said  # one line
    if case.after:
        case.after(ctx)
