"""A package index on disk with verl releases declaring what the real ones declare that the matrix reads: a base
transformers and tensordict range, and extras that pin exact releases (verl 0.9.1's `cpu` pins torch 2.11.0 and
transformers 5.9.0; its `vllm` pulls `verl[verl-core]`, whose own lines then apply). Matrices loaded with it read
the index through HARNESS_INDEX_URL, never the network."""
from __future__ import annotations

from pathlib import Path

from fake_index import FakeIndex
from matrix_helpers import VALID

BASE = ("tensordict!=0.9.0,<=0.10.0,>=0.8.0", "transformers!=5.6.0,<5.11,>=5.5.3", "numpy>=2.0.0")
EXTRAS_091 = ('torch==2.11.0; extra == "cpu"', 'transformers==5.9.0; extra == "cpu"', 'verl[verl-core]; extra == "cpu"',
              'verl[verl-core]; extra == "vllm"', 'vllm==0.24.0; extra == "vllm"', 'torch==2.11.0; extra == "vllm"',
              'pyzmq==27.0.0; extra == "verl-core"', 'flash-attn==2.8.3; extra == "fsdp"')
# matrix_helpers' one-cell matrix on Python 3.11 (verl 0.9.1 declares <3.13), transformers 5.9.0, tensordict 0.10.0
HEAD = VALID.replace('name = "t"\n', 'name = "t"\npython = "3.11"\n').replace(
    'transformers = ["5.3.0"]\n', 'transformers = ["5.9.0"]\ntensordict = ["0.10.0"]\n')


def verl_index(root: Path, monkeypatch) -> FakeIndex:
    """The index, with HARNESS_INDEX_URL pointing at it (and an empty find-links folder) for the test."""
    fake = FakeIndex(root / "index")
    fake.add("verl", "0.8.0", ("tensordict!=0.9.0,<=0.10.0,>=0.8.0", "transformers", "numpy<2.0.0"), python=">=3.10")
    fake.add("verl", "0.9.1", BASE + EXTRAS_091, python="<3.13,>=3.10")
    for version in ("5.3.0", "5.9.0", "5.10.4", "5.23.0"):
        fake.add("transformers", version)
    for version in ("0.10.0", "0.15.3"):
        fake.add("tensordict", version)
    for version in ("2.11.0", "2.13.0"):
        fake.add("torch", version)
    (root / "links").mkdir(exist_ok=True)
    monkeypatch.setenv("HARNESS_INDEX_URL", fake.url)
    monkeypatch.setenv("UV_FIND_LINKS", str(root / "links"))
    return fake


def write_matrix(root: Path, body: str) -> Path:
    path = root / "m.toml"
    path.write_text(HEAD + body)
    return path
