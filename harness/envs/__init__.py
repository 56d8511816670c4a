"""Cell environments: uv venvs with a cell's pins, pip settings forwarded to uv, environment capture,
device probes, and container images (a cell run inside its image).

May import: harness.errors, harness.results, harness.checks.
"""
