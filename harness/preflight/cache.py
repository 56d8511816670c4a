"""Recent resolutions, so a second pre-flight of a matrix costs no resolver call.

Keyed by everything the answer depends on: the pins, the source builds, the target, uv's version and the
index settings uv sees. An entry is used for `max_age_s` (the unpinned dependencies of a lock move with new
releases); unanswered resolutions are never kept.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from harness.envs import cellenv, pipconfig
from harness.results.records import write_json_atomic

from . import verdicts
from .resolve import METHOD, Resolution, Target

DEFAULT_MAX_AGE_S = 12 * 3600.0


def uv_version() -> str:
    done = subprocess.run([cellenv.uv_binary(), "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def key(requirements: list[str], from_source: tuple[str, ...], target: Target, uv: str) -> str:
    settings = {name: value for name, value in sorted({**os.environ, **pipconfig.uv_environment()}.items())
                if name.startswith("UV_") and ("INDEX" in name or "FIND_LINKS" in name or "CONSTRAINT" in name)}
    text = json.dumps([sorted(requirements), sorted(from_source), target.platform, target.python, uv, settings, METHOD])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class Cache:
    def __init__(self, directory: Path | None, max_age_s: float = DEFAULT_MAX_AGE_S):
        self.directory, self.max_age_s = directory, max_age_s

    def get(self, name: str) -> Resolution | None:
        if self.directory is None:
            return None
        path = self.directory / f"{name}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if time.time() - float(data["stored"]) > self.max_age_s:
                return None
            return Resolution.from_dict(data["resolution"])
        except (OSError, ValueError, KeyError, TypeError):  # absent or unreadable: resolve again
            return None

    def put(self, name: str, resolution: Resolution) -> None:
        if self.directory is None or resolution.verdict == verdicts.UNKNOWN:
            return
        write_json_atomic(self.directory / f"{name}.json", {"stored": time.time(), "resolution": resolution.to_dict()})
