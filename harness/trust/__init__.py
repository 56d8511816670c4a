"""The trust verbs: bisect (the first release where a verdict changes) and repro (rerun one check from
a cell's recorded lock).

May import: harness.errors, harness.results, harness.checks, harness.matrix, harness.envs, harness.execution.
"""
