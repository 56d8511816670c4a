"""The install verdicts of a cell, in the plain words the report and the setup findings use."""
from __future__ import annotations

INSTALLS = "installs"
CONFLICT = "cannot be installed together"  # the resolver's reason follows
NEEDS_BUILD = "needs a build on the runner"  # a pin is a source release only (or the recipe builds it)
NOT_ON_RUNNER = "not installable on this runner"  # a pin has wheels for other platforms and no source release
UNKNOWN = "pre-flight failed"  # the resolver could not answer (index unreachable): no verdict, the runner decides

ALL = (INSTALLS, CONFLICT, NEEDS_BUILD, NOT_ON_RUNNER, UNKNOWN)
# What the nightly still dispatches: the runner can build what needs a build, and an unanswered cell is tried.
DISPATCHED = (INSTALLS, NEEDS_BUILD, UNKNOWN)


def counted(verdict: str, count: int) -> str:
    """'1 installs', '2 install', '37 need a build on the runner': a count of cells with the verb agreeing."""
    if count != 1:
        verdict = {INSTALLS: "install", NEEDS_BUILD: "need a build on the runner"}.get(verdict, verdict)
    return f"{count} {verdict}"
