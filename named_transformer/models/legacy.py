"""0.4.0's attention functions, kept by name and by argument order.

Before one pipeline served every variant, each variant had a functional form with
every weight and option as an argument (13 to 19 of them): ``multihead_attention(
inputs, memory, w_q, w_k, w_v, w_o, mask, b_q, ...)``. Code written against them keeps
working: :func:`keeps_signature` makes a function with the old name and signature
that binds its arguments as the old one did, then hands them, as one mapping, to the
pipeline (:func:`~named_transformer.models.multihead.run_legacy`). ``help()`` and
``inspect.signature`` show the old signature. New code passes the weights as one
:class:`~named_transformer.models.attention_weights.AttentionWeights` to
:func:`~named_transformer.models.multihead.multihead`.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["keeps_signature"]


def _signature(parameters: str) -> inspect.Signature:
    """The signature a ``def`` with this parameter list has (defaults are literals)."""
    arguments = ast.parse(f"def old({parameters}): pass").body[0].args
    required = len(arguments.args) - len(arguments.defaults)
    empty, literal = inspect.Parameter.empty, ast.literal_eval
    positional = [
        inspect.Parameter(
            argument.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=empty if index < required
            else literal(arguments.defaults[index - required]),
        )
        for index, argument in enumerate(arguments.args)
    ]  # fmt: skip
    keyword_only = [
        inspect.Parameter(
            argument.arg, inspect.Parameter.KEYWORD_ONLY,
            default=empty if default is None else literal(default),
        )
        for argument, default in zip(
            arguments.kwonlyargs, arguments.kw_defaults, strict=True
        )
    ]  # fmt: skip
    return inspect.Signature(positional + keyword_only)


def keeps_signature(
    name: str, parameters: str, run: Callable[[Mapping[str, Any]], Any]
) -> Callable[..., Any]:
    """A function called ``name`` with the parameter list ``parameters`` that calls
    ``run`` with its bound arguments (defaults filled in), by name."""
    signature = _signature(parameters)

    def old(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return run(bound.arguments)

    old.__name__ = old.__qualname__ = name
    old.__signature__ = signature  # type: ignore[attr-defined]
    old.__doc__ = (
        f"0.4.0's ``{name}``, kept: the same arguments, computed by the one "
        "multi-head pipeline (:func:`~named_transformer.models.multihead.multihead`)."
    )
    return old
