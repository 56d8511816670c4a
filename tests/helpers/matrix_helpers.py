"""A one-cell matrix file and its loader, shared by the matrix tests."""
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


def load_text(tmp_path, text):
    path = tmp_path / "m.toml"
    path.write_text(text)
    return matrix.load(path)
