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
