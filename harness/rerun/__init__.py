"""Reruns of recorded checks in other environments: repro (one cell's check, from the cell's recorded lock),
bisect (a check across the releases of one package, to the first whose verdict changes) and first_bad (the
nightly's bisection of each check a new release turned from pass to anything else).

May import: harness.errors, harness.files, harness.results, harness.checks, harness.matrix, harness.envs,
harness.execution.
"""
