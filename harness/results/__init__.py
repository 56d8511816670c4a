"""Results: the records a run writes per cell and check (records), the comparison of a run with a
previous one (compare), and of two results directories entry by entry (verdict_diff); whether a directory
option can hold what a run or check will write (directories). Readers of many runs
live in harness.report.

May import: harness.errors.
"""
