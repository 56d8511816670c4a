"""The docs' tables, generated from the code they describe: the checks (the registry), the sessions
(`nox -l --json`), the exit statuses (the error classes) and the measured figures (bench/figures.json).
Pages hold each table between `<!-- generated: NAME -->` and `<!-- end generated -->`; `python -m
harness.docsgen` rewrites them, `--check` fails on a page that disagrees with the code.

May import: harness.errors, harness.files, harness.checks, harness.results, harness.plans (the launch-plans table).
"""
