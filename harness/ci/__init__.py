"""CI glue: the GitHub job matrix and summary (github), and workflow jobs run locally under act (act).

May import: harness.errors, harness.matrix, harness.envs.
"""
