"""Workflows: generated tasks, model kinds, training, the experiment runner and the CLI."""

from named_transformer.workflows.runner import *  # noqa: F403
from named_transformer.workflows.runner import __all__  # noqa: F401
