"""The matrix: matrix files (TOML) expanded into cells, selector rules, the axes, and the package-index check.

May import: harness.errors, harness.files, harness.checks, harness.envs.
"""
from .expand import Cell, Matrix, load

__all__ = ["Cell", "Matrix", "load"]
