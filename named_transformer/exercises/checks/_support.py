"""What every page's checks share: the tensors they draw, and the ways they fail.

A check fails by raising an ``AssertionError`` whose message says, in the learner's
words, what differs, by how much and on what input; these helpers write those
messages, so that every check words the same failure the same way.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import torch
from jaxtyping import TypeCheckError
from torch import Tensor

# a check: takes the implementation under test, raises on a failure
Check = Callable[[Callable[..., Any]], None]  # allow-raw: a type, not an index
DTYPE = torch.float64  # tight tolerances: a real mistake is never within 1e-9
TOLERANCE = 1e-6
FLOAT32_TOLERANCE = 1e-5  # relative to the largest expected number: float32 rounding
LARGE = 2e4  # a score this large overflows exp in float32 (and in float64)
AT_LARGE_SCORES = "for scores of about ±2e4 in float32"


def _randn(*shape: int, seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=DTYPE)


def _dyadic(*shape: int, seed: int = 0) -> Tensor:
    """Float32 numbers on a grid of 1/4 within ±2. Their products and short sums are
    exact in float32, even next to ±4e4, so float32 and float64 compute the same
    scores and any difference in the result is the learner's, not rounding."""
    return ((_randn(*shape, seed=seed) * 4).round() / 4).clamp(-2, 2).float()


def _for_drawn_sizes(prop: Callable[[int, int, int], None]) -> None:
    """Run ``prop(batch, seq, width)`` on sizes hypothesis draws, each axis a different
    length from 2 to 9. The draws are the same on every run (derandomised), and a
    failure is shrunk to the smallest sizes that fail before its message is raised."""
    from hypothesis import HealthCheck, Verbosity, given, settings
    from hypothesis import strategies as st

    sizes = st.lists(st.integers(2, 9), min_size=3, max_size=3, unique=True)

    @settings(
        max_examples=12,
        derandomize=True,
        deadline=None,
        database=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    @given(sizes)
    def run(drawn: list[int]) -> None:
        prop(*drawn)

    _without_leftovers(run)


def _without_leftovers(run: Callable[[], None]) -> None:
    """``run()`` with hypothesis's storage (the constants it caches from the local
    source, the learner's files among them) in a temporary folder, removed after:
    ``exercises check`` and the docs build leave no ``.hypothesis/`` folder in the
    working directory. The storage used before is restored (a test suite's own)."""
    from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

    before = storage_directory(intent_to_write=False).home_directory
    with tempfile.TemporaryDirectory(prefix="named_transformer-hypothesis-") as home:
        set_hypothesis_home_dir(home)
        try:
            run()
        finally:
            set_hypothesis_home_dir(before)


def _shape(tensor: Tensor) -> str:
    return str(tuple(tensor.shape))


def _difference(actual: Tensor, expected: Tensor) -> float:
    return (actual.to(DTYPE) - expected.to(DTYPE)).abs().max().item()


def _close(
    actual: Any,
    expected: Tensor,
    what: str,
    where: str = "",
    *,
    tolerance: float = TOLERANCE,
    mistakes: Sequence[tuple[Tensor, str]] = (),
) -> None:
    """``actual`` equals ``expected`` within the tolerance, else say by how much.

    ``mistakes`` pairs what a known mistake computes with what to say about it: when
    ``actual`` is that, the message names the mistake, not only the difference."""
    where = f" {where}" if where else ""
    if not isinstance(actual, Tensor):
        raise AssertionError(f"returns a {type(actual).__name__}, not a tensor{where}")
    if actual.shape != expected.shape:
        raise AssertionError(
            f"returns shape {_shape(actual)} where {what} has shape "
            f"{_shape(expected)}{where}"
        )
    if expected.dtype == torch.bool:
        if actual.dtype != torch.bool:
            raise AssertionError(f"returns dtype {actual.dtype}, not torch.bool")
        wrong = int((actual != expected).sum())
        if wrong:
            raise AssertionError(f"differs from {what} at {wrong} positions{where}")
        return
    difference = _difference(actual, expected)
    if not difference <= tolerance:  # also catches NaN
        named = [say for made, say in mistakes if _difference(actual, made) < tolerance]
        because = f": {named[0]}" if named else ""
        raise AssertionError(f"differs from {what} by {difference:.3g}{where}{because}")


def _stable(
    actual: Any,
    expected: Tensor,
    what: str,
    where: str = AT_LARGE_SCORES,
    magnitude: float = LARGE,
) -> None:
    """At large scores in float32 (``expected`` computed in float64): no NaN or inf,
    and ``expected`` to float32's precision at scores of size ``magnitude``.

    A right softmax rounds a number of that size once: x - max(x) is exact, but
    exp(x - logsumexp(x)) rounds logsumexp(x) to half a unit in its last place,
    eps·|x|/2 (7e-4 at 2e4 in float32), which every weight carries as a relative
    error and the result as that times its scale. The tolerance is twice that
    rounding: a correct implementation written either way passes, and a softmax
    that overflows or leaks is still far off."""
    if isinstance(actual, Tensor) and not bool(actual.isfinite().all()):
        raise AssertionError(
            f"returns NaN or inf {where}, scores a trained model produces: "
            "exp overflows (or every exp underflows to 0); subtract each row's "
            "maximum score before exp, which leaves the softmax unchanged"
        )
    scale = max(1.0, expected.abs().max().item())
    rounding = 2 * torch.finfo(torch.float32).eps * magnitude
    _close(actual, expected, what, where,
           tolerance=max(FLOAT32_TOLERANCE, rounding) * scale)  # fmt: skip


def _zeros_and_zero_gradient(
    call: Callable[..., Tensor],
    inputs: dict[str, Tensor],
    row: tuple[int, ...],
    what: str,
) -> Tensor:
    """``call(*inputs)`` at ``row``, a row that may attend nothing (``what``), is all
    zeros, never NaN, and its gradient with respect to every input is zero: no NaN
    reaches a training step. Returns the whole result, for the other rows' check."""
    leaves = {name: x.detach().clone().requires_grad_() for name, x in inputs.items()}
    result = call(*leaves.values())
    if not isinstance(result, Tensor):
        raise AssertionError(f"returns a {type(result).__name__}, not a tensor")
    blocked = result[row]
    if bool(blocked.isnan().any()):
        raise AssertionError(f"{what} gives NaN, not zeros")
    largest = blocked.abs().max().item()
    if not largest <= TOLERANCE:
        raise AssertionError(f"{what} gives values up to {largest:.3g}, not zeros")
    if not blocked.requires_grad:
        return result.detach()
    gradients = torch.autograd.grad(
        blocked.sum(), list(leaves.values()), allow_unused=True
    )
    for name, gradient in zip(leaves, gradients, strict=True):
        if gradient is None:
            continue
        if bool(gradient.isnan().any()):
            raise AssertionError(
                f"{what} gives zeros, but its gradient with respect to {name} is NaN, "
                "not zero (one such row makes a whole training step NaN)"
            )
        if not (size := gradient.abs().max().item()) <= TOLERANCE:
            raise AssertionError(
                f"{what} gives zeros, but its gradient with respect to {name} is "
                f"{size:.3g}, not zero"
            )
    return result.detach()


def _same_gradient(
    impl_call: Callable[[Tensor], Tensor],
    reference: Callable[[Tensor], Tensor],
    inputs: Tensor,
    what: str,
) -> None:
    """The gradient of ``impl_call`` with respect to ``inputs`` is the reference's
    (for a random weighting of the outputs, so that every output counts)."""
    weighting = _randn(*inputs.shape, seed=99)
    gradients = []
    for call in (impl_call, reference):
        leaf = inputs.detach().clone().requires_grad_()
        (call(leaf) * weighting).sum().backward()
        gradients.append(leaf.grad)
    if gradients[0] is None:
        raise AssertionError(f"has no gradient with respect to its inputs ({what})")
    _close(gradients[0], gradients[1], f"the gradient of {what}",
           "(its gradient with respect to the inputs)")  # fmt: skip


def _rejects(call: Callable[[], Any], what: str) -> None:
    """``call`` must fail with a shape error: the ``checked`` decorator is kept."""
    try:
        call()
    except TypeCheckError:
        return
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - any other failure is the wrong kind
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise AssertionError(
            f"{what} should be a shape error (keep the `checked` decorator), "
            f"but raised {type(error).__name__}: {first}"
        ) from None
    raise AssertionError(f"accepts {what}: keep the `checked` decorator")


def _unpack(result: Any, names: str, where: str = "") -> tuple[Any, ...]:
    """``result`` as the tuple ``names`` (comma-separated) describes, else say so."""
    count = names.count(",") + 1
    if not isinstance(result, tuple) or len(result) != count:
        where = f" {where}" if where else ""
        raise AssertionError(f"returns {type(result).__name__}, not ({names}){where}")
    return result
