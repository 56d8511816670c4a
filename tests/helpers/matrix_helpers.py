"""A one-cell matrix file and its loader, shared by the matrix tests; INCLUDE_312 adds a Megatron cell on
Python 3.12 (the `python` axis)."""
from __future__ import annotations

import textwrap

from harness import matrix

VALID = textwrap.dedent("""\
    [matrix]
    name = "t"
    checks = ["stack-smoke"]

    [axes]
    transformers = ["5.3.0"]
    torch = ["2.13.0"]
    backend = ["fsdp"]
    model = ["text"]
    device = ["cpu"]
    """)

INCLUDE_312 = textwrap.dedent("""\

    [[include]]
    backend = "megatron"
    megatron_core = "0.19.2"
    python = "3.12"
    """)


def load_text(tmp_path, text):
    path = tmp_path / "m.toml"
    path.write_text(text)
    return matrix.load(path)
