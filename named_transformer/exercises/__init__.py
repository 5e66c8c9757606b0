"""Exercises: write the library's functions yourself; its own tests check them.

    python -m named_transformer exercises init my_attention
    python -m named_transformer exercises check my_attention softmax

One exercise per equation of the Learn and Models pages
(:data:`~named_transformer.exercises.registry.EXERCISES`); the skeletons are generated
from the library's functions (:func:`~named_transformer.exercises.learner.skeleton`);
the checks (:mod:`named_transformer.exercises.checks`) are the ones the library's own
test suite runs on the library.
"""

from named_transformer.exercises.checks import CHECKS
from named_transformer.exercises.learner import (
    Result,
    check_directory,
    check_exercise,
    load_learner,
    skeleton,
    write_exercises,
)
from named_transformer.exercises.registry import EXERCISES, PAGES, Exercise, exercise

__all__ = [
    "CHECKS",
    "EXERCISES",
    "PAGES",
    "Exercise",
    "Result",
    "check_directory",
    "check_exercise",
    "exercise",
    "load_learner",
    "skeleton",
    "write_exercises",
]
