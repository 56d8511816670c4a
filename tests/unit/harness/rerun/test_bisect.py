"""harness/rerun/bisect.py: the cells a bisection builds keep their template's interpreter (the first release
where a verdict changes, end to end: tests/e2e/test_bisect.py)."""
from matrix_helpers import INCLUDE_312, VALID, load_text


def test_bisect_cells_keep_the_templates_interpreter(tmp_path):
    from packaging.version import Version

    from harness.rerun.bisect import cell_for

    template = load_text(tmp_path, VALID + INCLUDE_312).cells[1]
    probe = cell_for(template, "transformers", Version("5.9.0"))
    assert probe.id == "megatron-text-tf5.9.0-torch2.13.0-mcore0.19.2-py3.12" and probe.python == "3.12"
