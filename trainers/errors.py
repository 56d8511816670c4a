"""What stops a trainer, each with its own exit status (trainers/launch.py prints one line and leaves with it).

The trainer's own statuses, as harness/errors.py has the harness's: 2 bad input (an option, a config file,
a model config that does not fit the model, an engine that is not installed), 3 something this stack cannot
run, 4 a run stopped at a non-finite loss or gradient norm.
"""
from __future__ import annotations


class TrainerError(Exception):
    exit_code = 1


class TrainerInputError(TrainerError, ValueError):
    """Bad input, found before any model is built where it can be; exit 2."""

    exit_code = 2


class TrainerUnavailable(TrainerError, RuntimeError):
    """This environment cannot run what was asked (a model variant, Qwen3.5 itself); exit 3."""

    exit_code = 3


class NonFiniteTraining(TrainerError, RuntimeError):
    """A step's loss or gradient norm was NaN or infinite: the run stops there; exit 4."""

    exit_code = 4
