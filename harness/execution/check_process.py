"""A check's own process: `python -m harness.execution.check_process NAME --result-file FILE [options]`.

Each check of a cell runs here, in a fresh interpreter (runner.run_isolated) or in a process forked from the
cell's check server (forkserver calls `main`). It checks the options, runs the check through
`runner.execute` (where its exceptions become a status), writes the result file the runner reads
(runner.outcome), and prints the result. `python -m harness check NAME` is `run` in the current environment.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from harness import checks
from harness.errors import CHECK_FAILED, DONE, ArgumentParser, InputError, exit_status
from harness.results.directories import directory_problem
from harness.results.records import write_json_atomic

from . import runner

SEED_LIMIT = 2**32  # numpy's limit; torch's is higher: a seed must work for both


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model", choices=("text", "vl", "moe"), default="text")
    parser.add_argument("--backend", choices=("fsdp", "megatron"), default="fsdp")
    parser.add_argument("--mode", choices=("sync", "fully-async"), default="sync")
    parser.add_argument("--model-config", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--max-ranks", type=int, default=None,
                        help="the most ranks the check may start at once (bridge-parity: 1 runs only its one-rank "
                             "jobs)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the check writes its work files (default: a temporary directory, removed "
                             "unless the check fails, then kept and named)")
    parser.add_argument("--result-file", type=Path, default=None, help=argparse.SUPPRESS)


def check_seed_and_steps(args) -> None:
    if not 0 <= args.seed < SEED_LIMIT:
        raise InputError(f"--seed: expected a whole number from 0 to {SEED_LIMIT - 1}, got {args.seed}")
    if args.steps is not None and args.steps < 1:
        raise InputError(f"--steps: expected a whole number of at least 1, got {args.steps}")


def check_directory(option: str, path: Path) -> None:
    problem = directory_problem(option, path)
    if problem:
        raise InputError(problem)


def _check_model_config(path: Path, kind: str) -> None:
    """A --model-config must be a JSON object of keys the model's config class has or a released Qwen3.5 config
    carries (plans/models/released-keys.toml), finite, with sizes >= 1: any other key would otherwise test the
    default model in silence. The trainers' own reading (trainers.models) decides; the keys are checked where this
    environment has Qwen3.5."""
    if not path.is_file():
        raise InputError(f"--model-config: {path} is not a file")
    from trainers.models import Qwen35Unavailable, check_override, read_override

    try:
        override = read_override(path)
        check_override(kind, override, f"--model-config {path}")
    except Qwen35Unavailable:  # no Qwen3.5 here: the check itself reports that
        return
    except ValueError as exc:
        raise InputError(str(exc)) from None


def run(args) -> int:
    """Check the options, run the check here, write its result file (if asked) and print it; CHECK_FAILED (1) if it
    failed."""
    if args.name not in checks.CHECKS:
        raise InputError(f"unknown check {args.name!r}; expected one of {', '.join(checks.CHECKS)}")
    spec = checks.CHECKS[args.name]
    if args.backend not in spec.backends:  # the matrix skips such a cell; asked for by name, it is an error
        raise InputError(f"--backend {args.backend}: check {args.name} runs on backend "
                         f"{' or '.join(spec.backends)} only")
    check_seed_and_steps(args)
    if args.model_config is not None:
        _check_model_config(args.model_config, args.model)
    if args.work_dir is not None:
        check_directory("--work-dir", args.work_dir)
    if args.max_ranks is not None and args.max_ranks < 1:
        raise InputError(f"--max-ranks: expected a whole number of ranks, at least 1, got {args.max_ranks}")
    # Every option is checked above: nothing is made for a check that will not run.
    work = args.work_dir or (args.result_file.parent if args.result_file else None)
    scratch = work is None
    if scratch:
        # Never litter the current directory: work files left in a checkout end up committed.
        work = Path(tempfile.mkdtemp(prefix=f"harness-check-{args.name}-"))
    options = checks.CheckOptions(model=args.model, backend=args.backend, seed=args.seed, steps=args.steps,
                                  model_config=args.model_config, work_dir=work, mode=args.mode,
                                  max_ranks=args.max_ranks)
    result = runner.execute(args.name, options)
    if scratch and not result.status.is_failure:
        shutil.rmtree(work, ignore_errors=True)
    elif scratch:
        print(f"work files kept in {work}", file=sys.stderr)
    if args.result_file:
        write_json_atomic(args.result_file, result.to_dict())
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(f"{result.check}: {result.status.value} - {result.message}")
        for verdict in result.verdicts:
            print(f"  {verdict.name}: {verdict.status.value} - {verdict.message}")
    return CHECK_FAILED if result.status.is_failure else DONE


def main(argv: list[str] | None = None) -> int:
    """The process's entry: parse the check's arguments and `run` it; errors become one line and an exit status."""
    parser = ArgumentParser(prog="python -m harness.execution.check_process",
                            description="run one check in this process and write its result file")
    add_arguments(parser)
    return exit_status(lambda: run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
