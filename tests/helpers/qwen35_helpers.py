"""Shared by the patch tests: skip where the installed transformers has no Qwen3.5 (before 5.2)."""
import pytest


def qwen35_or_skip() -> None:
    from trainers.models import Qwen35Unavailable, build_config

    try:
        build_config("text")
    except Qwen35Unavailable as exc:
        pytest.skip(str(exc))
