"""Benchmarks (`nox -s bench`): environments, report rendering and check budgets (suite), GRPO against
TRL's GRPOTrainer (grpo, trl). Figures go to a file, never into test assertions.

May import: any room of the harness.
"""
