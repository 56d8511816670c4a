"""`python -m harness plan FILE...`: print a verdict per launch plan, one line per reason.

Exit status: 0 when every plan would start, 1 when one would not (or is unchecked somewhere) or one that
would start declares `[expect] starts = false` (a stale declaration, said on its own line), 2 for a plan
file that is not valid (InputError), 3 without torch here. `--json` prints JSON.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from ..errors import EnvironmentMissing, InputError


def add_parser(sub) -> None:
    plan = sub.add_parser("plan", help="check launch plans (plans/*.toml) against this environment's versions")
    plan.add_argument("files", type=Path, nargs="+", metavar="FILE")
    plan.add_argument("--json", action="store_true")


def cmd_plan(args) -> int:
    from .plan_format import load_plan

    plans = [load_plan(path) for path in args.files]  # every file validated before any is evaluated
    names = [p.path.resolve() for p in plans]
    if len(set(names)) != len(names):
        raise InputError("plan: the same file is named twice")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch
    except ImportError:
        raise EnvironmentMissing("plan: needs torch in this environment (and megatron-core for Megatron "
                                 "plans); run it in a cell's environment or `nox -s tests`'s") from None

    torch.set_num_threads(1)
    # megatron-core warns on import that Transformer Engine and Apex are absent: true, and beside the point
    warnings.filterwarnings("ignore", module=r"megatron\.")
    from .verdict import START, evaluate

    verdicts = [evaluate(plan) for plan in plans]
    if args.json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=1))
    else:
        for verdict in verdicts:
            print("\n".join(verdict.lines()))
    sys.stdout.flush()
    return 0 if all(v.verdict == START and not v.stale_expect for v in verdicts) else 1
