"""The measured page's table: figures with their machine and date, and what is missing said as such."""
from __future__ import annotations

from harness.docsgen import figures, pages


def test_measured_figures_carry_machine_and_date_and_say_what_is_missing():
    data = {"date": "2026-01-02", "machine": {"cpu": "Some CPU", "cores": 2},
            "report": {"render_cpu_s": 1.5, "html_bytes": 2**20, "date": "2026-01-01"}}
    table = figures.measured_table(data)
    row = next(line for line in table.splitlines() if "10,000" in line)
    assert "1.50 s" in row and "1.0 MiB" in row and "2026-01-01" in row and "Some CPU, 2 cores" in row
    assert "not measured" in table  # the groups this data lacks
    partial = figures.measured_table({**data, "report": {"date": "2026-01-01"}})
    assert "CPU time, every format: not measured" in partial


def test_the_measured_page_shows_the_file_figures():
    current = figures.load()
    assert f"{current['grpo_vs_trl']['summary']['speedup_to_threshold']:.2f}x" in (
        pages.ROOT / "docs" / "measured.md").read_text()
