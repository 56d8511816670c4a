"""Offline runs on an air-gapped accelerator box: a wheelhouse of exactly what the box's interpreter lacks
(`wheelhouse`, built where there is a network), and a run on the box's own interpreter that installs only from it
(`box_interpreter`: the box's package list, the rows it may run, a row's overlay), refusing where the interpreter
is not what the row declares. `benchmarks` are those an offline evidence run takes along; `command` holds the
verbs (`wheelhouse`, `run --here`).

May import: harness.errors, harness.files, harness.checks, harness.matrix, harness.envs, harness.results.
"""
