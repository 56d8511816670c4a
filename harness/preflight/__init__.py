"""Pre-flight: whether each accelerator cell can be installed, known on a CPU machine before a runner is booked.

`resolve` asks uv for the cell's full lock on the runner's platform and Python (metadata only, nothing is
downloaded or built), `verdicts` names the outcomes, `cache` keeps recent answers, `store` writes them as
cell results that the report shows until a runner's result replaces them, `dispatch` drops from the nightly's
job matrix the cells that cannot install, and `command` is the `preflight` verb. `cpuside` goes one step further for
a chosen slice of cells: it installs each from its exact wheels and runs there, on CPU, the checks that need no
accelerator (`cpuside_command`, the `cpu-side` verb).

May import: harness.errors, harness.checks, harness.matrix, harness.envs, harness.results, harness.execution.
"""
