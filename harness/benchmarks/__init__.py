"""Benchmarks (`nox -s bench`): environments, report rendering and check budgets (suite), GRPO against
TRL's GRPOTrainer (grpo, trl), a matrix slice cold serially and with the defaults, and a warm rerun (matrix,
phases). Figures go to a file, never into test assertions.

May import: any room of the harness.
"""
