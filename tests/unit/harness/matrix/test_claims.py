"""What the matrices' comments claim is "newest" agrees with the index data recorded in
matrices/metadata/releases.json (`python -m harness.matrix.snapshot`), and a stale claim is caught."""
import json
from pathlib import Path

import pytest

from harness import matrix
from harness.errors import InputError
from harness.matrix.claims import claims

MATRICES = Path(__file__).resolve().parents[4] / "matrices"
RECORDED = json.loads((MATRICES / "metadata" / "releases.json").read_text())


def test_the_snapshot_names_its_index_and_date():
    assert RECORDED["index"].startswith(("https://", "file://")) and len(RECORDED["date"]) == 10


@pytest.mark.parametrize("path", sorted(MATRICES.glob("*.toml")), ids=lambda p: p.name)
def test_every_newest_claim_in_the_matrices_agrees_with_the_index(path):
    wrong = [why for claim in claims(path.read_text()) if (why := claim.check(RECORDED["releases"]))]
    assert not wrong, f"{path.name}: {wrong}"


def test_the_claims_are_found_in_each_form():
    found = {(c.distribution, c.version, c.python) for c in claims((MATRICES / "cpu.toml").read_text())}
    assert {("tensordict", "0.15.3", None), ("megatron-core", "0.16.1", "3.11"),
            ("megatron-core", "0.19.2", None)} <= found


def test_a_stale_newest_claim_is_caught():
    stale = ("# 5.9.0: first 5.9.x, where upstream fixed it. 5.23.0: newest.\n"
             'transformers = ["5.9.0", "5.23.0"]\n'
             "# megatron-core 0.15.0 (newest for Python 3.11)\n"
             'tensordict = ["0.10.0"]   # and the newest\n')
    releases = {"transformers": [{"version": "5.23.0", "requires_python": ""},
                                 {"version": "5.24.0", "requires_python": ">=3.11"}],
                "megatron-core": [{"version": "0.15.0", "requires_python": ""},
                                  {"version": "0.16.1", "requires_python": ">=3.10"},
                                  {"version": "0.17.0", "requires_python": ">=3.12"}],
                "tensordict": [{"version": "0.10.0", "requires_python": ""},
                               {"version": "0.15.3", "requires_python": ""}]}
    assert [c.check(releases) for c in claims(stale)] == [
        "line 1: claims transformers 5.23.0 is the newest; the index has 5.24.0",
        "line 3: claims megatron-core 0.15.0 is the newest for Python 3.11; the index has 0.16.1",
        "line 4: claims tensordict 0.10.0 is the newest; the index has 0.15.3"]


@pytest.mark.parametrize("value, where", [('"as-pinned-by-nothing"', "include[0].torch"),
                                          ('"as-pinned-by-vllm"', "include[0].torch")])
def test_a_derived_value_needs_a_package_axis_to_read_from(tmp_path, value, where):
    path = tmp_path / "m.toml"
    path.write_text('[matrix]\nname = "d"\nchecks = ["stack-smoke"]\n[axes]\nbackend = ["fsdp"]\nmodel = ["text"]\n'
                    f'device = ["cpu"]\ntransformers = ["5.9.0"]\n[[include]]\ntorch = {value}\n')
    expected = "expected as-pinned-by-AXIS" if "nothing" in value else "the cell has no vllm release to read it from"
    with pytest.raises(InputError, match=rf"m.toml \(line 10\): include.*torch: .*{expected}"):
        matrix.load(path)
