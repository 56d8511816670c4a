"""matrices/cuda.toml promises, for every vLLM release, transformers rows the release accepts and one it
does not (a conflict cell that shows the resolver's reason at setup). Checked against the pins its
header records from each wheel's metadata."""
import re
from pathlib import Path

from packaging.specifiers import SpecifierSet

from harness import matrix

CUDA = Path(__file__).resolve().parents[4] / "matrices" / "cuda.toml"
PIN_LINE = re.compile(r"^#\s+vllm ([\d., ]+):\s+torch==\S+, transformers(\S+)$")


def header_pins() -> dict[str, SpecifierSet]:
    pins = {}
    for line in CUDA.read_text().splitlines():
        if found := PIN_LINE.match(line):
            for release in found[1].split(","):
                pins[release.strip()] = SpecifierSet(found[2])
    return pins


def test_every_vllm_release_has_accepted_rows_and_a_conflict_row():
    pins = header_pins()
    assert len(pins) >= 7, pins  # 0.27.0 to 0.33.0
    cells = [c for c in matrix.load(CUDA).cells if c.axes.get("backend") == "fsdp" and "vllm" in c.axes]
    for release, spec in pins.items():
        rows = {c.axes["transformers"] for c in cells if c.axes["vllm"] == release}
        assert {v for v in rows if v in spec}, f"vllm {release}: no transformers row it accepts"
        assert {v for v in rows if v not in spec}, f"vllm {release}: no conflict row ({spec})"
