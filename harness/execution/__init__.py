"""Execution: the `run`, `check`, `envinfo` and `checkserver` verbs (command). A run goes command -> run (the
matrix's cells, its lock) -> cell (one cell's path; container_cell for a cell in its image; ray_dispatch for
cells on a Ray cluster) -> forkclient/forkserver or runner (each check in its own process, check_process, with
a timeout), with jobs (how many cells at once, their progress) and reuse of a check's result in other cells by
what it loaded (reuse, module_providers).

May import: harness.errors, harness.files, harness.results, harness.checks, harness.matrix, harness.envs,
harness.offline, harness.report.
"""
