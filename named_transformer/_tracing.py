r"""einops' calls kept whole in ``torch.compile``'s graph: faster compiles, the same
compiled code.

Dynamo (the part of ``torch.compile``, and of a strict ``torch.export``, that reads
Python bytecode) traces into einops' own Python at every call: its pattern parser and
its caches, where most of its steps go when it reads this package's models.
Registered with ``torch._dynamo.allow_in_graph``, each ``rearrange``, ``reduce``,
``repeat``, ``einsum``, ``pack`` and ``unpack`` is one node of the graph instead, and
dynamo's part of a compile takes a fifth to a half of the time. The compiled code is
the same: AOTAutograd traces each such node into the same aten operations (with fake
tensors), and Inductor compiles those. (einops registered them itself until torch 2.8;
torch now traces through einops 0.8.2 and later, to put only torch's own operations in
dynamo's graph.)

Registering imports ``torch._dynamo``, over a second, which ``import
named_transformer`` must not pay (issue 45), and torch has no public hook that runs
when dynamo loads. So, unless dynamo is already loaded, a finder on ``sys.meta_path``
waits for its first import (the first ``torch.compile``, or an export), lets it
finish, registers, and removes itself.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

import einops

__all__ = ["IN_GRAPH"]

#: The einops functions dynamo records as one node each.
IN_GRAPH = (
    einops.rearrange,
    einops.reduce,
    einops.repeat,
    einops.einsum,
    einops.pack,
    einops.unpack,
)


def _register(dynamo: ModuleType) -> None:
    try:
        for function in IN_GRAPH:
            dynamo.allow_in_graph(function)
    except Exception as error:  # a speed-up only: compiling must work without it
        warnings.warn(
            f"einops' calls are traced, not kept whole in the graph: {error}",
            stacklevel=2,
        )


class _WhenDynamoLoads(importlib.abc.MetaPathFinder):
    """Finds no module itself: at the import of ``torch._dynamo`` it takes the spec
    the other finders give, and registers, then leaves, once the module has run (a
    lookup that imports nothing, ``importlib.util.find_spec``, leaves it waiting)."""

    asking = False  # while it asks the other finders, it answers None

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo" or self.asking:
            return None
        self.asking = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.asking = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module: ModuleType) -> None:
                run(module)
                with contextlib.suppress(ValueError):  # already gone
                    sys.meta_path.remove(self)
                _register(module)

            spec.loader.exec_module = exec_module  # this module's own loader only
        return spec


if "torch._dynamo" in sys.modules:  # loaded before the package: register now
    _register(sys.modules["torch._dynamo"])
else:
    sys.meta_path.insert(0, _WhenDynamoLoads())
