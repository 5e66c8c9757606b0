"""Ctrl-C while ``python -m named_transformer`` starts: one line and exit status 130.

Importing torch and the package takes seconds (far longer on a busy machine), and a
``KeyboardInterrupt`` raised inside those imports prints a long traceback from deep in
torch. ``python -m`` imports the package before its ``__main__``, so the package's
``__init__`` imports this module first, and importing it calls :func:`quiet_start`
(``sys.argv[0]`` is ``"-m"`` while ``python -m`` locates its module, and only then).
``__main__`` calls :func:`started` once the command line is imported; from there on
Ctrl-C raises ``KeyboardInterrupt`` as usual, and the command line turns it into one
line of its own. Importing the package any other way changes nothing.

Under ``python -m named_transformer`` it parses the command line first
(:func:`parse_first`), before the package imports torch: ``--help`` (the main one and
every command's) and a usage mistake answer at once, without importing torch. A valid
command then imports the package as usual and runs.

It also imports jaxtyping without jax (:func:`jaxtyping_without_jax`): where jax is
installed (Tracr, for the RASP page and tests, brings it), jaxtyping imports it for its
``PyTree`` type, and its first check imports it to filter jax's tracebacks; the library
never uses either: one to two seconds on every start.
"""

from __future__ import annotations

import _thread
import importlib.util
import os
import signal
import sys
import threading
from types import FrameType

__all__ = ["jaxtyping_without_jax", "parse_first", "quiet_start", "started"]

INTERRUPTED = "interrupted while starting; nothing was done"


def _stop(signum: int, frame: FrameType | None) -> None:
    # Nothing has been done yet, so there is nothing to save or clean up: leave at
    # once, without unwinding through half-finished imports.
    sys.stderr.write(INTERRUPTED + "\n")
    sys.stderr.flush()
    os._exit(130)


def quiet_start() -> None:
    """Under ``python -m named_transformer``, until :func:`started`: Ctrl-C prints
    :data:`INTERRUPTED` and exits with status 130. A SIGINT that is ignored (a
    background job) stays ignored."""
    main = threading.current_thread() is threading.main_thread()
    if sys.argv[:1] != ["-m"] or not main:
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop)


def _run_as_main() -> bool:
    """Whether ``python -m named_transformer`` is locating its ``__main__`` now."""
    if sys.argv[:1] != ["-m"]:
        return False
    command = getattr(sys, "orig_argv", [])  # python, its options, -m, the module
    for option, following in zip(command, [*command[1:], ""], strict=True):
        if option.startswith("-m"):  # "-m name" or "-mname"
            return (option[2:] or following) == "named_transformer"
    return False


def parse_first() -> None:
    """Under ``python -m named_transformer``: parse the command line with the parser of
    :mod:`~named_transformer.workflows.cli`, which imports no torch. ``--help`` and a
    usage mistake exit here; a valid command returns, and ``__main__`` parses it again
    once the package is imported (a few milliseconds)."""
    if _run_as_main():
        from named_transformer.workflows.cli import parser

        parser().parse_args(sys.argv[1:])


def started() -> None:
    """Ctrl-C raises ``KeyboardInterrupt`` again (if :func:`quiet_start` changed it),
    and one that Python could only print is raised again (:func:`_deliver_again`)."""
    if signal.getsignal(signal.SIGINT) is _stop:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.unraisablehook is not _deliver_again:
        global _python_hook
        _python_hook = sys.unraisablehook
        sys.unraisablehook = _deliver_again


_python_hook = sys.unraisablehook


def _deliver_again(unraisable) -> None:
    """A ``KeyboardInterrupt`` raised where Python cannot pass an exception on (in a
    garbage collector's callback, such as hypothesis's, or a ``__del__``) is printed as
    "Exception ignored in ..." with a traceback, and the command carries on: Ctrl-C is
    sent to the main thread again instead, where the command line reports it in one
    line. (Sent from another thread a moment later: sent now, it would be raised
    inside this hook, which cannot pass it on either.) Every other unraisable
    exception goes to Python's hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        again = threading.Timer(0.05, _thread.interrupt_main)
        again.daemon = True  # not waited for if the command is ending anyway
        again.start()
        return
    _python_hook(unraisable)


def jaxtyping_without_jax() -> None:
    """Import jaxtyping (if nothing has yet) as if jax were not installed: it then
    skips its jax-only ``PyTree``; jax itself stays importable, and imports as usual
    when something else asks for it."""
    if "jaxtyping" in sys.modules:
        return
    find_spec = importlib.util.find_spec

    def without_jax(name: str, package: str | None = None):
        return None if name == "jax" else find_spec(name, package)

    importlib.util.find_spec = without_jax  # jaxtyping asks it whether jax exists
    try:
        import jaxtyping._decorator
    finally:
        importlib.util.find_spec = find_spec
    # its first `jaxtyped` would import jax to hide its own frames from jax's
    # tracebacks: nothing to hide here, no jax array is ever checked
    if getattr(jaxtyping._decorator, "_tb_flag", False):
        jaxtyping._decorator._tb_flag = False


quiet_start()
parse_first()
jaxtyping_without_jax()
