"""Execution: running a matrix (cells one by one, in parallel, or as Ray tasks), each check in its own
process with a timeout, the progress line, and reuse of a check's result in other cells by what it loaded
(loaded, reuse).

May import: harness.errors, harness.results, harness.checks, harness.matrix, harness.envs.
"""
