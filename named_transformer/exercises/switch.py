"""Your own GPT: the learner's functions inside the library's modules.

    import named_transformer as nt

    with nt.exercises.use("my_attention"):      # the folder `exercises init` wrote
        run = nt.train_text(nt.read_corpus(None))  # every block computes with yours

Inside the block (or from the call on, until :meth:`use.restore`), every module of
the library that calls ``softmax``, ``attention_weights``, ``attend``, ``layer_norm``
or ``feed_forward`` calls the learner's function of that name instead: the
decoder-only model's attention (through the materialising core), its layer norms and
its feed-forwards are then the learner's code, with the library's weights, training
loop and sampling around them. ``names`` picks fewer (the ones written so far). While
an attention function is switched in, the automatic core materialises at every length
(the blockwise path, chosen from 384 positions on, or 768 with no mask or a padding
mask, would not call it), and ``nt.attention`` runs its equation, not PyTorch's fused
kernel.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from named_transformer.core.blockwise import automatic_block
from named_transformer.core.fast import fused_kernel_computes
from named_transformer.core.softmax import softmax_
from named_transformer.exercises.learner import load_learner
from named_transformer.exercises.registry import EXERCISES

__all__ = ["SWITCHED", "use"]

SWITCHED = ("softmax", "attention_weights", "attend", "layer_norm", "feed_forward")
"""The exercises :class:`use` plugs into the model by default: the functions every
block of the decoder-only model calls."""

ATTENTION = {"softmax", "attention_weights", "attend"}
"""The exercises the materialising attention core calls: while one is switched in,
the automatic core (:func:`~named_transformer.core.blockwise.automatic_block`)
materialises at every length, so that the learner's function is the one called."""

_active: list[use] = []


def _materialise(seq_q: int, seq: int, **_: Any) -> None:
    """:func:`~named_transformer.core.blockwise.automatic_block` while the learner's
    attention is switched in: always the materialising core (None)."""


def _no_kernel(*_: Any, **__: Any) -> bool:
    """:func:`~named_transformer.core.fast.fused_kernel_computes` while the learner's
    attention is switched in: never (the kernel would not call it)."""
    return False


def _library_modules() -> list[ModuleType]:
    """The library's loaded modules, the exercises' own aside."""
    return [
        module for name, module in list(sys.modules.items())
        if (name == "named_transformer" or name.startswith("named_transformer."))
        and not name.startswith("named_transformer.exercises")
        and isinstance(module, ModuleType)
    ]  # fmt: skip


# --8<-- [start:use]
class use:  # noqa: N801 - a switch, read as a verb: nt.exercises.use(DIR)
    """Switch the library's ``names`` to the learner's functions, from ``source``
    (a folder written by ``exercises init``, or a mapping name -> function).

    Works as a statement (switched until :meth:`restore`) or as a context manager
    (restored on exit). A name that is not an exercise, or a function the learner's
    files do not define or cannot import, is a ValueError in one line; one switch at
    a time.
    """

    def __init__(
        self,
        source: str | Path | Mapping[str, Callable[..., Any]],
        names: Iterable[str] = SWITCHED,
    ) -> None:
        names = list(names)
        for name in names:
            if name not in EXERCISES or EXERCISES[name].method is not None:
                raise ValueError(f"{name!r} is not an exercise function; choose among "
                                 f"{', '.join(SWITCHED)}")  # fmt: skip
        if _active:
            raise ValueError("a learner switch is already on (restore it first)")
        if isinstance(source, Mapping):
            found: Mapping[str, Any] = source
        else:
            found = load_learner(source)
        self.replaced: list[tuple[ModuleType, str, Any]] = []
        learner: dict[str, Callable[..., Any]] = {}
        for name in names:
            function = found.get(name, f"no {name} given")
            if not callable(function):
                raise ValueError(f"{name}: {function}")
            learner[name] = function
        pairs = [(EXERCISES[name].library_function, function)
                 for name, function in learner.items()]  # fmt: skip
        if ATTENTION & set(learner):
            # only the materialising core calls them: no blockwise path, however long
            pairs.append((automatic_block, _materialise))
            pairs.append((fused_kernel_computes, _no_kernel))  # nor PyTorch's kernel
        if "softmax" in learner:  # the library's in-place softmax is a softmax too
            pairs.append((softmax_, learner["softmax"]))
        # the faster functions that compute the library's calls (core/fast.py), which
        # call each other there: switched with the equation they stand in for
        pairs += [(library.equation.faster, function) for library, function in pairs
                  if hasattr(getattr(library, "equation", None), "faster")]  # fmt: skip
        replacing = {id(library): function for library, function in pairs}
        for module in _library_modules():
            for attribute, value in list(vars(module).items()):
                if id(value) in replacing:
                    self.replaced.append((module, attribute, value))
                    setattr(module, attribute, replacing[id(value)])
        self.names = tuple(learner)
        _active.append(self)

    def restore(self) -> None:
        """Put the library's functions back."""
        for module, attribute, value in reversed(self.replaced):
            setattr(module, attribute, value)
        self.replaced.clear()
        if self in _active:
            _active.remove(self)

    def __enter__(self) -> use:
        return self

    def __exit__(self, *_: object) -> None:
        self.restore()


# --8<-- [end:use]
