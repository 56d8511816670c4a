"""Synthetic cells (synthetic.py), for tests and the report benchmark: deterministic and varied."""
from __future__ import annotations

from harness.report import synthetic
from harness.report.synthetic import synthetic_cells
from harness.results.records import Status


def test_synthetic_cells_are_deterministic_and_varied(monkeypatch):
    a, b = synthetic_cells(300, seed=7), synthetic_cells(300, seed=7)
    assert [c.to_dict() for c in a] == [c.to_dict() for c in b]
    assert len({c.cell_id for c in a}) == 300
    assert {s for c in a for k in c.checks for s in [k.status]} == set(Status)
    assert any(k.verdicts and k.verdicts[0].emulated for c in a for k in c.checks)
    for name, values in (("TRANSFORMERS", ["5.3.0", "5.23.0"]), ("TORCH", ["2.13.0"]), ("TENSORDICT", ["0.15.3"])):
        monkeypatch.setattr(synthetic, name, values)
    many = synthetic_cells(800, seed=1)  # more cells than version combinations: images tell them apart
    assert len({c.cell_id for c in many}) == 800 and any("image" in c.axes for c in many)
