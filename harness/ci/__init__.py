"""CI glue: the `ci` verb the GitHub workflows call (github: the job matrix, the job summary, the results a
partial nightly run carries forward) and workflow jobs run locally under act (act).

May import: harness.errors, harness.files, harness.matrix, harness.envs, harness.results, harness.preflight.
"""
