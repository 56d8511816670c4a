"""Offline runs on an air-gapped accelerator box: a wheelhouse of exactly what the box's interpreter lacks
(`wheelhouse`, built where there is a network), and a run on the box's own interpreter that installs only from it
(`here`), refusing where the interpreter is not what the row declares. `have` reads the box's package list.

May import: harness.errors, harness.checks, harness.matrix, harness.envs, harness.results.
"""
