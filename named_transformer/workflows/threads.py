"""How many threads torch runs a workflow's work with: one rule, in one place.

PyTorch splits each large enough operation over its intra-op threads, one per core by
default, and every split ends at a barrier where the threads wait for each other. When
another process wants a core, the OS takes it from one of those threads, and every
operation then waits for that thread to be scheduled again: on a 2-core machine with
one other busy process, a training step of the copy recipe took 3.88 times as long as
idle with two threads, and 1.26 times with one (the Performance page's busy-machine
table). Many small operations, a small model's whole step, suffer most;
and a second thread barely speeds them on an idle machine either.

So a training run (:meth:`~named_transformer.workflows.training.Trainer.fit`) takes
:func:`suited_threads`: one thread for a model below :data:`SMALL` parameters (the
recipes' tiny and small sizes), or on a machine whose other processes already keep
all but one core busy; else torch's own count. An ``OMP_NUM_THREADS`` set by the user
wins. The count is restored when the run ends: a library never changes it for good.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn

__all__ = ["SMALL", "busy_cores", "suited_threads", "threads", "with_suited_threads"]

# Below this many parameters one thread is as fast as two on an idle 2-core machine,
# or nearly (a step of the copy recipe's 22,272: 38 ms on one, 45 on two; of a
# 235,264-parameter model: 113 and 105 ms), and far faster on a busy one.
SMALL = 1_000_000

_F = TypeVar("_F", bound=Callable[..., Any])


def busy_cores(seconds: float = 0.1) -> float:
    """How many cores other processes keep busy, measured over ``seconds`` while this
    one sleeps (Linux's ``/proc/stat``; 0.0 where it cannot be read)."""

    def busy_and_total() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
        idle = ticks[3] + ticks[4]  # idle and waiting for I/O
        return sum(ticks) - idle, sum(ticks)

    try:
        busy, total = busy_and_total()
        time.sleep(seconds)
        busy_after, total_after = busy_and_total()
    except (OSError, ValueError, IndexError):
        return 0.0
    elapsed = total_after - total
    cores = os.cpu_count() or 1
    return cores * (busy_after - busy) / elapsed if elapsed > 0 else 0.0


def suited_threads(model: nn.Module) -> int:
    """The thread count to train ``model`` with (see the module's docstring)."""
    if "OMP_NUM_THREADS" in os.environ:
        return torch.get_num_threads()
    if sum(p.numel() for p in model.parameters()) < SMALL:
        return 1
    free = (os.cpu_count() or 1) - round(busy_cores())
    return max(1, min(torch.get_num_threads(), free))


@contextlib.contextmanager
def threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` for the block, then put back."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def with_suited_threads(method: _F) -> _F:
    """Run a method of an object that holds ``.model`` (a trainer) with
    :func:`suited_threads` for that model."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with threads(suited_threads(self.model)):
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]
