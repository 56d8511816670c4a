"""Pre-flight: whether each accelerator cell can be installed, known on a CPU machine before a runner is booked.

`resolve` asks uv for the cell's full lock on the runner's platform and Python (metadata only, nothing is
downloaded or built) and names the outcome (its install verdict), `store` writes them as cell results that the
report shows until a runner's result replaces them and drops from the nightly's job matrix the cells that cannot
install, and `command` is the `preflight` verb, with its cache of recent answers. `cpu_side` goes one step
further for a chosen slice of cells (the `cpu-side` verb): it installs each from its exact wheels and runs there,
on CPU, the checks that need no accelerator.

May import: harness.errors, harness.files, harness.checks, harness.matrix, harness.envs, harness.results,
harness.execution.
"""
