"""Axis values that name a source revision instead of a release: `git+https://HOST/OWNER/REPO@REV`.

Some stacks need a package from its repository: verl's Qwen3.5 Megatron path uses mbridge's Qwen3.5
support, which no release on the package index has yet. A matrix names the revision:

    mbridge = "git+https://github.com/ISEEKYAN/mbridge@9b43cc0d0e220416523a9fe46e9164558870b124"

verl's own code between releases is a row the same way (`verl = "git+https://github.com/verl-project/verl@SHA"`),
named by a full commit hash: a branch or a tag would move under the row from one run to the next.

Only the form above is accepted, on an allowed host, with owner, repository and revision made of
plain characters (no user, port, query, fragment or option), so nothing else reaches uv. The axes that
take such a value are listed in SOURCE_AXES; every other package axis stays an exact release.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# axes whose value may be a git source (their distribution is built from the repository at REV)
SOURCE_AXES = ("mbridge", "verl")
COMMIT_AXES = ("verl",)  # source axes whose revision must be a full commit hash
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
ALLOWED_HOSTS = ("github.com", "gitlab.com")
_SOURCE = re.compile(r"^git\+https://(?P<host>[a-z0-9.-]{1,63})/(?P<owner>[A-Za-z0-9][A-Za-z0-9_.-]{0,38})/"
                     r"(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]{0,99}?)(?:\.git)?@(?P<rev>[A-Za-z0-9][A-Za-z0-9_.-]{0,99})$")
PREFIX = "git+"


class SourceError(ValueError):
    """The value looks like a source but is not of the allowed form; the message says what was expected."""


@dataclass(frozen=True)
class GitSource:
    host: str
    owner: str
    repo: str
    rev: str

    @property
    def url(self) -> str:
        return f"git+https://{self.host}/{self.owner}/{self.repo}@{self.rev}"

    @property
    def id_part(self) -> str:
        """How the value appears in a cell id: the revision, shortened like git's abbreviated hashes."""
        return f"git-{self.rev[:12]}"


def is_source(value: str) -> bool:
    return value.startswith(PREFIX)


def parse(value: str) -> GitSource:
    match = _SOURCE.match(value)
    if not match:
        raise SourceError(f"{value!r} is not a git source of the form git+https://github.com/OWNER/REPO@REVISION")
    if match["host"] not in ALLOWED_HOSTS or ".." in value:
        raise SourceError(f"{value!r}: host {match['host']!r} is not one of {', '.join(ALLOWED_HOSTS)}")
    return GitSource(match["host"], match["owner"], match["repo"], match["rev"])


def parse_for(axis: str, value: str) -> GitSource:
    """`parse`, and for an axis in COMMIT_AXES a revision that is a full commit hash."""
    source = parse(value)
    if axis in COMMIT_AXES and not _COMMIT.match(source.rev):
        raise SourceError(f"{value!r}: {axis} from git names a full 40-character commit hash, not {source.rev!r} "
                          "(a branch or tag moves)")
    return source


def requirement(distribution: str, value: str) -> str:
    """The requirement uv installs for an axis value: an exact pin, or `name @ git+https://...@REV`."""
    return f"{distribution} @ {parse(value).url}" if is_source(value) else f"{distribution}=={value}"


# uv's words when a git source cannot be fetched: the runner has no route to its host.
_UNREACHABLE = ("failed to fetch", "git operation failed", "could not resolve host", "dns error",
                "failed to clone", "name or service not known", "network is unreachable")


UNREACHABLE_REMEDY = "a runner with network access to it installs the row"


def unreachable_reason(requirements: list[str], log_tail: str) -> str | None:
    """Why a cell with a git source failed to install, when that source cannot be reached from this runner:
    the host and uv's words; else None."""
    hosts = {m.group(1) for r in requirements if (m := re.search(r"git\+https://([a-z0-9.-]+)/", r))}
    text = log_tail.lower()
    if not hosts or not any(word in text for word in _UNREACHABLE) or not any(h in text for h in hosts):
        return None
    said = [line.strip() for line in log_tail.splitlines() if any(word in line.lower() for word in _UNREACHABLE)]
    return f"it cannot reach {', '.join(sorted(hosts))} to fetch the git source (uv: {said[-1][:300]})"


def unreachable_source(requirements: list[str], log_tail: str) -> str | None:
    """The same as one line naming the source and what would make it install; else None."""
    reason = unreachable_reason(requirements, log_tail)
    return f"not installable on this runner: {reason}; {UNREACHABLE_REMEDY}" if reason else None
