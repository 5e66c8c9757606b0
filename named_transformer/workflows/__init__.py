"""Workflows: the generated tasks, model kinds, training, experiment runner and CLI."""

from named_transformer.workflows.runner import *  # noqa: F403
from named_transformer.workflows.runner import __all__  # noqa: F401
