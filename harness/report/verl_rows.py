"""What a verl row says beside its verdicts (the `verl` axis: harness/matrix/axes.py, docs/verl.md).

A verl row installs a verl release (or a git revision of it) with the row's pins; its checks run verl's own code
where verl has a counterpart (CheckSpec.verl, recorded in `verl:` verdicts) and this project's code elsewhere. So
each verl row names both (`code_split`), says which of its pins are outside verl's declared range and were
installed through an override (`outside_text`, from the result's record: harness/matrix/crossing.py), and carries
the pins in the order the row installed them (`install_pins`), which its pins box gives as the line to type.
"""
from __future__ import annotations

from collections.abc import Iterable

from packaging.requirements import InvalidRequirement, Requirement

from harness.checks import CHECKS
from harness.matrix.axes import requirements
from harness.matrix.sources import is_source
from harness.matrix.sources import parse as parse_source
from harness.results.records import CellResult

AXIS = "verl"
NO_COUNTERPART = "no verl counterpart"


def release_label(value: str, extra: str = "") -> str:
    """'verl 0.9.1 [cpu]', or 'verl from git 1dda039b9c63' for a revision."""
    if is_source(value):
        try:
            name = f"verl from git {parse_source(value).rev[:12]}"
        except ValueError:
            name = "verl from git"
    else:
        name = f"verl {value}"
    return name + (f" [{extra}]" if extra else "")


def code_split(checks: Iterable[str]) -> str:
    """Which of `checks` run verl's code in a verl row and which run this project's:
    "verl's code: offload-regression (verl: ...); this project's code: stack-smoke (no verl counterpart)"."""
    names = list(dict.fromkeys(checks))
    verls = [f"{name} (verl: {CHECKS[name].verl})" for name in names if name in CHECKS and CHECKS[name].verl]
    own = [name for name in names if name not in CHECKS or not CHECKS[name].verl]
    parts = [f"verl's code: {', '.join(verls)}"] if verls else []
    if own:
        parts.append(f"this project's code: {', '.join(own)} ({NO_COUNTERPART})")
    return "; ".join(parts)


def outside_text(records: object) -> str:
    """'outside verl's declared range: transformers 5.23.0 (verl 0.9.1 declares transformers<5.11,...)'; '' for
    none. Built from the record's fields (not its `text`): a result file is never trusted to say it."""
    if not isinstance(records, list):
        return ""
    said = []
    for r in records:
        if isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("distribution", "version", "crossed",
                                                                            "crossed_version", "declared")):
            said.append(f"{r['distribution']} {r['version']} ({r['crossed']} {r['crossed_version']} declares "
                        f"{r['distribution']}{r['declared']})")
    crossed = next((r["crossed"].split("[")[0] for r in records if isinstance(r, dict) and r.get("crossed")), AXIS)
    return f"outside {crossed}'s declared range: {'; '.join(said)}" if said else ""


def install_pins(cell: CellResult) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the row's requirements in install order, the override lines its install used): as recorded, else from its
    axes (a result written before the record existed), with no override. Only what reads as a requirement is kept:
    the pins box offers them as a command to copy."""
    recorded = cell.environment.get("requirements")
    if isinstance(recorded, list) and recorded:
        pins = recorded
    else:
        try:
            pins = requirements({a: v for a, v in cell.axes.items() if isinstance(v, str)})
        except ValueError:  # a git value the matrix would refuse: no line to offer
            pins = []
    outside = cell.environment.get("outside_range")
    overrides = [f"{r.get('distribution')}=={r.get('version')}" for r in outside if isinstance(r, dict)] \
        if isinstance(outside, list) else []
    return tuple(p for p in pins if _requirement(p)), tuple(o for o in overrides if _requirement(o))


def _requirement(text: object) -> bool:
    if not isinstance(text, str) or len(text) > 300:
        return False
    try:
        Requirement(text)
    except InvalidRequirement:
        return False
    return True
