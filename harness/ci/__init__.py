"""CI glue: the GitHub job matrix and summary (github), workflow jobs run locally under act (act), and the
previous results a partial nightly run carries forward (carry).

May import: harness.errors, harness.matrix, harness.envs, harness.results.
"""
