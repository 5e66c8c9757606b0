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

import importlib

# Each name's module, imported on first use: the command line's parser reads the
# registry (the exercises' names) without torch, which the checks and the learner's
# loader import.
_MODULES = {
    "CHECKS": "checks",
    "EXERCISES": "registry", "PAGES": "registry", "Exercise": "registry",
    "exercise": "registry",
    "Result": "learner", "check_directory": "learner", "check_exercise": "learner",
    "load_learner": "learner", "skeleton": "learner", "write_exercises": "learner",
    "SWITCHED": "switch", "use": "switch",
}  # fmt: skip

__all__ = list(_MODULES)


def __getattr__(name: str) -> object:
    if name in _MODULES:
        return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
