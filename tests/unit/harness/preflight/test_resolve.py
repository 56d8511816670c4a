"""A cell's resolver target follows its runner and image, and the verdicts are counted with the verb agreeing."""
from __future__ import annotations

from harness.matrix import Cell
from harness.preflight.resolve import target_for


def test_the_target_follows_the_runner_and_the_image():
    cell = Cell("npu", "c", {"backend": "fsdp", "model": "text", "device": "npu",
                             "image": "quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.12"}, (), (),
                runner="linux-aarch64-a3-8")
    assert (target_for(cell, "3.11").platform, target_for(cell, "3.11").python) == ("aarch64-manylinux_2_28", "3.12")
    plain = Cell("cuda", "d", {"backend": "fsdp", "model": "text", "device": "cuda"}, (), (), runner="linux-x64-gpu")
    assert (target_for(plain, "3.11").platform, target_for(plain, "3.11").python) == ("x86_64-manylinux_2_28", "3.11")


def test_the_summary_counts_cells_with_the_verb_agreeing():
    from harness.preflight import resolve as verdicts

    assert verdicts.counted(verdicts.INSTALLS, 1) == "1 installs"
    assert verdicts.counted(verdicts.INSTALLS, 2) == "2 install"
    assert verdicts.counted(verdicts.NEEDS_BUILD, 37) == "37 need a build on the runner"
    assert verdicts.counted(verdicts.CONFLICT, 14) == "14 cannot be installed together"
