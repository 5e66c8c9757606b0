"""Workflows: the generated tasks, model kinds, training, experiment runner and CLI.

The names of :mod:`~named_transformer.workflows.runner` are this package's too
(``from named_transformer.workflows import train_task``, ``import *``), imported on
first use: the command line's parser (:mod:`~named_transformer.workflows.cli`) lives
here and imports no torch, so that ``python -m named_transformer --help`` answers at
once.
"""

import importlib
import importlib.util


def __getattr__(name: str) -> object:
    # a submodule (``from named_transformer.workflows import cli``) is the import
    # system's to load: answering it must not import the runner
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}"):
        raise AttributeError(name)
    runner = importlib.import_module("named_transformer.workflows.runner")
    if name == "__all__" or name in runner.__all__:
        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
