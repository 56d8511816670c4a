"""Results: the records a run writes per cell and check, each cell's with its source (records); the one loader
of a report directory's results of every source (sources); why a cell could not be installed
(install_verdict); a run against a previous one (compare) and two results directories entry by entry
(verdict_diff); whether a directory option can hold what a run or check will write (directories). The report
built from them lives in harness.report.

May import: harness.errors, harness.files.
"""
