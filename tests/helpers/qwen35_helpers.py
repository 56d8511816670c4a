"""Shared by the trainers' tests: skip where the installed transformers has no Qwen3.5 (before 5.2)."""
import pytest


def qwen35_or_skip() -> None:
    from trainers.models import Qwen35Unavailable, build_config

    try:
        build_config("text")
    except Qwen35Unavailable as exc:
        pytest.skip(str(exc))


def model_or_skip(kind: str = "text"):
    """The zoo's tiny `kind` model (trainers.models, seed 0), or a skip naming why there is none here."""
    from trainers.models import Qwen35Unavailable, build_model

    try:
        return build_model(kind, seed=0)
    except Qwen35Unavailable as exc:
        pytest.skip(str(exc))
