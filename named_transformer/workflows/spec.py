r"""A run's description: the task, the model kind and the model it builds.

A :class:`RunSpec` says which model a run of a generated task trains: the task, the
model kind (the object of :data:`~named_transformer.workflows.kinds.MODEL_KINDS`, not
its name), the size it was made from, the vocabulary's size and the model's
:class:`~named_transformer.models.config.TransformerConfig`. The runner, the command
line and the export pass it along; each asks it what it needs (``spec.kind.decode``,
``spec.config.layer``).

A checkpoint stores it as JSON (:meth:`RunSpec.to_dict`), and :meth:`RunSpec.from_dict`
reads it back: the one place a kind is looked up by its name in a file. A spec written
before 0.9 named its positions beside the configuration (``positions``,
``max_distance``, ``max_positions``, and the configuration's ``rotary_base``);
:func:`config_of` reads them into the configuration's ``positions``, so checkpoints of
0.1.0 to 0.8.x load as they did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from named_transformer.models.config import TransformerConfig
from named_transformer.models.variants import position_scheme
from named_transformer.workflows.kinds import MODEL_KINDS, ModelKind, kind_of
from named_transformer.workflows.tasks import TASKS, TaskInfo

__all__ = ["RunSpec", "config_of", "kind_for"]


@dataclass(frozen=True)
class RunSpec:
    """Which model a run trains: a ``kind`` that can learn ``task``, of the
    configuration ``config`` (made from the row ``size`` of
    :data:`~named_transformer.workflows.recipes.SIZES`) over ``vocab`` tokens.

    ``max_positions``: the longest input a spec written before 0.9 declared, for
    every position scheme (``decode`` refuses longer ones, as it did); None in the
    specs of 0.9 on, whose positions carry their own table's size.
    """

    task: str
    kind: ModelKind
    size: str
    vocab: int
    config: TransformerConfig
    max_positions: int | None = None

    def __post_init__(self) -> None:
        _refuse_unless_learns(self.task, self.kind)
        if self.vocab < 1:
            raise ValueError(f"RunSpec.vocab must be >= 1, got {self.vocab}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-friendly form a checkpoint stores (:meth:`from_dict` reads it)."""
        stored = {"task": self.task, "kind": self.kind.name, "size": self.size,
                  "vocab": self.vocab, "config": self.config.to_dict()}  # fmt: skip
        if self.max_positions is not None:  # read from a spec before 0.9: kept
            stored["max_positions"] = self.max_positions
        return stored

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> RunSpec:
        """The spec :meth:`to_dict` wrote, or one of an earlier version."""
        return cls(
            task=stored["task"], kind=kind_of(stored["kind"]), size=stored["size"],
            vocab=stored["vocab"], config=config_of(stored),
            max_positions=stored.get("max_positions"),  # before 0.9, or read from one
        )  # fmt: skip


def kind_for(task: str, name: str | None = None) -> ModelKind:
    """The model kind called ``name`` (by default the first registered one that can
    learn ``task``); ValueError in one line when it cannot learn ``task``."""
    if name is None:
        learns = _task(task).kind
        return next(kind for kind in MODEL_KINDS.values() if kind.learns == learns)
    kind = kind_of(name)
    _refuse_unless_learns(task, kind)
    return kind


def _task(task: str) -> TaskInfo:
    if task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    return TASKS[task]


def _refuse_unless_learns(task: str, kind: ModelKind) -> None:
    if kind.learns != _task(task).kind:
        raise ValueError(f"task {task!r} cannot be learned by a {kind.name} model")


def config_of(stored: Mapping[str, Any]) -> TransformerConfig:
    """The configuration a stored spec describes. Before 0.9 a spec named its
    positions beside the configuration (``positions``, ``max_distance``,
    ``max_positions``, and the configuration's ``rotary_base``): read here into
    ``positions``."""
    config = dict(stored["config"])
    if "positions" not in config:
        config["positions"] = position_scheme(
            stored.get("positions", "sinusoidal"),
            max_distance=stored.get("max_distance"),
            max_positions=stored.get("max_positions"),
            base=config.pop("rotary_base", None),
        ).to_dict()
    return TransformerConfig.from_dict(config)
