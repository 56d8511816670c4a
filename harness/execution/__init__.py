"""Execution: running a matrix (cells one by one, in parallel, or as Ray tasks), each check in its own
process with a timeout, and the progress line.

May import: harness.errors, harness.results, harness.checks, harness.matrix, harness.envs.
"""
