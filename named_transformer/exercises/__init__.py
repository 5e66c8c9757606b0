"""Exercises: write the library's functions yourself; its own tests check them.

    python -m named_transformer exercises init my_attention
    python -m named_transformer exercises check my_attention softmax

One exercise per equation of the Learn and Models pages
(:data:`~named_transformer.exercises.registry.EXERCISES`); the skeletons are generated
from the library's functions (:func:`~named_transformer.exercises.learner.skeleton`);
the checks (:mod:`named_transformer.exercises.checks`) are the ones the library's own
test suite runs on the library. :class:`~named_transformer.exercises.switch.use` puts
the learner's functions inside the library's model ("Your own GPT").
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
from named_transformer.exercises.switch import SWITCHED, use

__all__ = [
    "CHECKS",
    "EXERCISES",
    "PAGES",
    "SWITCHED",
    "Exercise",
    "Result",
    "check_directory",
    "check_exercise",
    "exercise",
    "load_learner",
    "skeleton",
    "use",
    "write_exercises",
]
