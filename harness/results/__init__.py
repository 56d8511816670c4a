"""Results: the records a run writes per cell and check (records), and the comparison of two runs
(compare). Readers of many runs live in harness.report.

May import: harness.errors.
"""
