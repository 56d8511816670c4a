"""matrices/cuda.toml promises, for every vLLM release, transformers rows the release accepts and one it
does not (a conflict cell that shows the resolver's reason at setup), on the torch the release pins. Checked
against each release's declared requirements, read from its wheel metadata (cached in matrices/metadata/)."""
from pathlib import Path

from packaging.version import Version

from harness import matrix
from harness.matrix.index import PackageIndex
from harness.matrix.metadata import MetadataSource
from harness.matrix.newest import Resolver

MATRICES = Path(__file__).resolve().parents[4] / "matrices"
CUDA = MATRICES / "cuda.toml"


def declared():
    index = PackageIndex(find_links=[])
    return Resolver(index, MetadataSource(index, MATRICES / "metadata", per_index=False), limits={})


def test_every_vllm_release_has_accepted_rows_and_a_conflict_row_on_its_own_torch():
    resolver = declared()
    # (a verl row's vLLM is the one its verl extra asks for: test_verl_matrix_rows.py)
    cells = [c for c in matrix.load(CUDA).cells if c.axes.get("backend") == "fsdp" and "vllm" in c.axes
             and "verl" not in c.axes]
    releases = sorted({c.axes["vllm"] for c in cells}, key=Version)
    assert len(releases) >= 7, releases  # 0.27.0 to 0.33.0
    for release in releases:
        spec = resolver.requirement_on("vllm", release, "transformers", "3.11")
        torch = resolver.requirement_on("vllm", release, "torch", "3.11")
        rows = [c for c in cells if c.axes["vllm"] == release]
        assert all(Version(c.axes["torch"]) in torch for c in rows), f"vllm {release}: torch not {torch}"
        versions = {c.axes["transformers"] for c in rows}
        assert {v for v in versions if v in spec}, f"vllm {release}: no transformers row it accepts"
        assert {v for v in versions if v not in spec}, f"vllm {release}: no conflict row ({spec})"
