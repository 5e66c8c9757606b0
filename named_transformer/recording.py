r"""Record and edit every activation the equations name, by a dotted name and with
its axes.

The equations of the library call :func:`tap` where they compute a value worth looking
at (the queries of every head, the attention weights, the residual stream, the
feed-forward's hidden units, the logits, ...):

$$\text{tap}(\text{name}, X, \text{axes}) = X$$

when nothing is recorded or edited: one context-variable lookup, and the value goes on
unchanged. Inside :func:`record` the value is kept, with the axes of the equation
that computed it (a :class:`Named`); inside :func:`edit` a function of it (or a tensor)
replaces it, and the rest of the forward pass computes with the replacement. The dotted
name is the module path of the model (``blocks.layers.3.self_attention``, PyTorch's
``named_modules``) and the tap's own name (``weights``):
``blocks.layers.3.self_attention.weights``. Module paths are read by forward hooks put
on the model for the duration of the ``with`` block and taken off after it.

The axes are a jaxtyping annotation, ``"*batch heads seq_q seq"``: ``*batch`` stands
for any number of leading axes (none, one, or several), which the equation is lifted
over. A position-wise equation (a norm, the feed-forward) is lifted over
$\mathsf{seq}$ too, so its values carry ``"*batch hidden"``, as its signature says.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from fnmatch import fnmatchcase
from typing import NamedTuple, TypeVar

import torch
from einops import rearrange
from torch import Tensor, nn

from named_transformer.axes import checked

__all__ = [
    "Edit",
    "Named",
    "Record",
    "ablate",
    "edit",
    "patch",
    "record",
    "scope",
    "tap",
    "tapping",
]


# --8<-- [start:Named]
class Named(NamedTuple):
    """A tensor and its axis names, as the equation that computed it annotates them.

    ``axes`` is a jaxtyping string such as ``"*batch heads seq_q seq"``; ``*batch``
    covers the leading axes the equation is lifted over. A tuple of two fields rather
    than a tensor subclass: every torch function takes ``.tensor`` as it is, and the
    names travel beside it, read by :meth:`to` and :meth:`dim`.
    """

    tensor: Tensor
    axes: str

    def dim(self, axis: str) -> int:
        """The position of ``axis`` in :attr:`tensor` (negative after ``*batch``)."""
        names = self.axes.split()
        if axis not in names:
            raise ValueError(f"no axis {axis!r} in {self.axes!r}")
        where = names.index(axis)
        star = next((i for i, n in enumerate(names) if n.startswith("*")), None)
        return where if star is None or where < star else where - len(names)

    def to(self, axes: str) -> Tensor:
        """The tensor with its axes in the order ``axes`` names them (einops'
        ``rearrange``; ``*batch`` is einops' ``...``)."""
        return rearrange(self.tensor, f"{_einops(self.axes)} -> {_einops(axes)}")


def _einops(axes: str) -> str:
    return " ".join("..." if name.startswith("*") else name for name in axes.split())


Edit = Tensor | Callable[[Named], Tensor]
"""What replaces a tapped value: a tensor, or a function of the :class:`Named` value."""


# --8<-- [end:Named]


# --8<-- [start:Record]
class Record(Mapping[str, Named]):
    """The values recorded by :func:`record`, by dotted name.

    ``record[name]`` is the :class:`Named` value of a tap that ran once;
    :meth:`calls` lists every value of a tap that ran more than once (a module called
    twice, a decoder's steps). :meth:`each` lists one name over the layers, and
    :meth:`stack` stacks them.
    The tensors are the forward pass's own (not copies): record under
    ``torch.no_grad()`` to keep no autograd graph.
    """

    def __init__(self, names: Sequence[str] | None = None) -> None:
        # a layer's {} (a template of each and stack) stands for any layer
        self.names = None if names is None else tuple(
            name.replace("{}", "*") for name in names
        )
        self._calls: dict[str, list[Named]] = {}

    def wants(self, name: str) -> bool:
        """Whether ``name`` matches the patterns asked for (all, when none were)."""
        if self.names is None:
            return True
        return any(fnmatchcase(name, pattern) for pattern in self.names)

    def calls(self, name: str) -> list[Named]:
        """Every value tapped under ``name``, in the order the taps ran."""
        if name not in self._calls:
            raise KeyError(_missing(name, self._calls))
        return list(self._calls[name])

    def __getitem__(self, name: str) -> Named:
        found = self.calls(name)
        if len(found) > 1:
            raise ValueError(
                f"{name!r} was tapped {len(found)} times (its module ran "
                f"{len(found)} times): read them all with .calls({name!r})"
            )
        return found[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._calls)

    def __len__(self) -> int:
        return len(self._calls)

    def each(self, template: str) -> list[Named]:
        """The values of ``template`` with ``{}`` = 0, 1, ..., in that order: one
        per layer, ``each("blocks.layers.{}.self_attention.weights")``. A name
        without ``{}`` is one layer: its one value."""
        if "{}" not in template:
            return [self[template]]
        pattern = re.compile(re.escape(template).replace(r"\{\}", r"(\d+)") + "$")
        found = sorted(
            (int(match[1]), name)
            for name in self._calls
            if (match := pattern.match(name))
        )
        if not found or [i for i, _ in found] != list(range(len(found))):
            raise KeyError(_missing(template.replace("{}", "0"), self._calls))
        return [self[name] for _, name in found]

    def stack(self, template: str, axis: str = "layers") -> Named:
        """The values of ``template`` with ``{}`` = 0, 1, ... stacked along a new
        leading ``axis``: ``stack("blocks.layers.{}.self_attention.weights")``.
        """
        values = self.each(template)
        tensor = rearrange([v.tensor for v in values], "new ... -> new ...")
        return Named(tensor, f"{axis} {values[0].axes}")

    def _add(self, name: str, value: Named) -> None:
        self._calls.setdefault(name, []).append(value)


# --8<-- [end:Record]


def _missing(name: str, known: Mapping[str, object]) -> str:
    near = _nearest(name, known)
    hint = f"; the nearest recorded: {', '.join(near)}" if near else ""
    return f"nothing was recorded as {name!r}{hint}"


def _nearest(name: str, known: Iterable[str], count: int = 3) -> list[str]:
    """The names of ``known`` nearest ``name`` (difflib's ratio); else their paths
    cut to as many parts as ``name`` has (``blocks.layers.9.*`` finds
    ``blocks.layers.1.self_attention``); else one name for each nearest last part
    (``*.weight`` finds ``blocks.layers.0.self_attention.weights``)."""
    known = sorted(set(known))
    depth = name.count(".") + 1
    cut = sorted({".".join(full.split(".")[:depth]) for full in known})
    for pool in (known, cut):
        near = difflib.get_close_matches(name, pool, n=count, cutoff=0.6)
        if near:
            return [repr(n) for n in near]
    last: dict[str, str] = {}
    for full in known:
        last.setdefault(full.rsplit(".", 1)[-1], full)
    parts = difflib.get_close_matches(name.rsplit(".", 1)[-1], list(last), n=count)
    return [repr(last[part]) for part in parts]


def _unmatched(ran: set[str], found: Record | None, edits: Mapping[str, Edit]) -> None:
    """Refuse a name to edit, or a pattern to record, that matched no tap of the
    block: the edit or the record would silently do nothing."""
    patterns = () if found is None or found.names is None else found.names
    missing = [p for p in patterns if not any(fnmatchcase(n, p) for n in ran)]
    missing += [name for name in edits if name not in ran]
    if not missing:
        return
    what = "pattern to record" if missing[0] in patterns else "name to edit"
    near = _nearest(missing[0], ran)
    hint = f"; the nearest: {', '.join(near)}" if near else ""
    if not ran:
        hint = "; no tap ran in the block (was the model called inside it?)"
    raise ValueError(
        f"the {what} {missing[0]!r} matches no tap that ran in the block{hint}"
    )


class _Session:
    """What is recorded and edited while a :func:`record` or :func:`edit` block runs,
    and the module path the next tap is named under."""

    def __init__(self, records: tuple[Record, ...], edits: dict[str, Edit]) -> None:
        self.records, self.edits = records, edits
        self.scopes: list[str] = []
        self.hooked: set[int] = set()
        self.ran: set[str] = set()  # every tap named while the block ran

    def full(self, name: str) -> str:
        scope = self.scopes[-1] if self.scopes else ""
        return f"{scope}.{name}" if scope else name

    def wants(self, name: str) -> bool:
        """Whether the value ``name`` (in the current module) is recorded or edited:
        a value computed only to be looked at is computed only then."""
        full = self.full(name)
        self.ran.add(full)  # a tap of the model, though it may not run
        return full in self.edits or any(r.wants(full) for r in self.records)

    def tap(self, name: str, tensor: Tensor, axes: str) -> Tensor:
        full = self.full(name)
        self.ran.add(full)
        change = self.edits.get(full)
        if change is not None:
            new = change(Named(tensor, axes)) if callable(change) else change
            if not isinstance(new, Tensor) or new.shape != tensor.shape:
                shape = getattr(new, "shape", type(new).__name__)
                raise ValueError(
                    f"the edit of {full!r} gave {tuple(shape)}, not the shape "
                    f"{tuple(tensor.shape)} ({axes}) of the value it replaces"
                )
            tensor = new.to(tensor.dtype)
        for found in self.records:
            if found.wants(full):
                found._add(full, Named(tensor, axes))
        return tensor


_T = TypeVar("_T")
# The session of this thread (or task); _SESSIONS counts the open ones of all threads,
# so that a forward pass with none open reads one global and goes on (torch.compile
# cannot trace a ContextVar).
_ACTIVE: ContextVar[_Session | None] = ContextVar("nt_taps", default=None)
_SESSIONS: list[_Session] = []


# --8<-- [start:tap]
def tap(name: str, tensor: _T, axes: str) -> _T:
    """``tensor``, recorded under ``name`` (prefixed by the module path) with its
    ``axes`` inside :func:`record`, replaced inside :func:`edit`; unchanged (one
    context-variable lookup) otherwise."""
    if not _SESSIONS:  # a plain global: a compiled graph reads it as a constant
        return tensor
    session = _ACTIVE.get()
    return tensor if session is None else session.tap(name, tensor, axes)


def tapping() -> _Session | None:
    """The active recording or editing session, or None: an equation computes a value
    it does not need itself (a per-head contribution) only when
    ``tapping().wants(name)``."""
    return _ACTIVE.get() if _SESSIONS else None


# --8<-- [end:tap]


# --8<-- [start:scope]
def scope(name: str) -> contextlib.AbstractContextManager[None]:
    """Name the taps run inside the block ``<module path>.<name>.<tap>``: a loop's
    steps (``steps.3``), which no module path tells apart. Nothing when no session is
    open."""
    session = tapping()
    if session is None:
        return contextlib.nullcontext()
    return _pushed(session, session.full(name))


# --8<-- [end:scope]


@contextlib.contextmanager
def _pushed(session: _Session, path: str) -> Iterator[None]:
    session.scopes.append(path)
    try:
        yield
    finally:
        session.scopes.pop()


def _hook(session: _Session, model: nn.Module) -> list:
    """Forward hooks that name the taps by module path while ``model`` runs."""
    if id(model) in session.hooked:
        return []
    session.hooked.add(id(model))
    handles = []
    for path, module in model.named_modules():

        def enter(module, args, path=path):
            session.scopes.append(path)

        def leave(module, args, output):
            session.scopes.pop()

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave, always_call=True))
    return handles


@contextlib.contextmanager
def _session(
    model: nn.Module | None, found: Record | None, edits: Mapping[str, Edit]
) -> Iterator[None]:
    outer = _ACTIVE.get()
    session = _Session((found,) if found is not None else (), dict(edits))
    if outer is not None:
        session.records = outer.records + session.records
        session.edits = {**outer.edits, **session.edits}
        # the same path stack: the outer session's hooks push the module paths of a
        # model it hooked, and this session names its taps from them (a copy would
        # stay empty, and an edit nested in a record would see bare names)
        session.scopes, session.hooked = outer.scopes, set(outer.hooked)
    handles = [] if model is None else _hook(session, model)
    token = _ACTIVE.set(session)
    _SESSIONS.append(session)
    try:
        yield
    finally:
        _SESSIONS.remove(session)
        _ACTIVE.reset(token)
        for handle in handles:
            handle.remove()
        if outer is not None:
            outer.ran |= session.ran
    _unmatched(session.ran, found, edits)  # only when the block raised nothing


# --8<-- [start:record]
@contextlib.contextmanager
def record(
    model: nn.Module | None = None, names: str | Sequence[str] | None = None
) -> Iterator[Record]:
    """Record the values tapped while the block runs: ``with record(model) as found:
    model(tokens)``, then ``found["blocks.layers.0.self_attention.weights"]``.

    ``names``: patterns (``fnmatch``: ``"*.weights"``; ``{}``, a layer's index in
    :meth:`Record.each`, is ``*``) of the names to keep; the others
    are not kept, and a value computed only to be looked at (the per-head
    contributions) is not computed. ``model``: the module whose paths prefix the names
    (None: the bare tap names, for a function called directly). A pattern that
    matches no tap that ran is refused when the block ends (a ``ValueError`` naming
    the nearest taps): a misspelt name records nothing.

    Attention weights exist only where they are materialised: while its scores or
    weights are recorded or edited, an attention uses the materialising core, whatever
    core it was built with (fused, blockwise). Its outputs then equal the unrecorded
    ones up to rounding; with the materialising core they are equal bit for bit.
    """
    found = Record([names] if isinstance(names, str) else names)
    with _session(model, found, {}):
        yield found


# --8<-- [end:record]


# --8<-- [start:edit]
@contextlib.contextmanager
def edit(model: nn.Module | None, edits: Mapping[str, Edit]) -> Iterator[None]:
    """Replace tapped values while the block runs: ``edits`` maps a dotted name to a
    tensor of the same shape, or to a function of the :class:`Named` value that
    returns one (:func:`ablate`, :func:`patch`). Inside a :func:`record` block the
    record keeps the edited values. A name that no tap ran under is refused when the
    block ends (a ``ValueError`` naming the nearest taps): a misspelt name would
    edit nothing and leave the output as it was."""
    with _session(model, None, dict(edits)):
        yield


@checked
def ablate(axis: str, index: int | slice) -> Callable[[Named], Tensor]:
    """An edit that zeroes entry ``index`` of ``axis``: ``ablate("heads", 3)`` on an
    attention's ``attended`` values removes head 3's output."""
    return patch(None, axis, index)


@checked
def patch(
    source: Named | None, axis: str | None = None, index: int | slice | None = None
) -> Callable[[Named], Tensor]:
    """An edit that puts in ``source``'s values (zeros when None): all of them, or
    entry ``index`` of ``axis`` only (activation patching from another input's
    :class:`Record`)."""

    def change(value: Named) -> Tensor:
        new = torch.zeros_like(value.tensor) if source is None else source.tensor
        if axis is None:
            return new.expand_as(value.tensor)  # allow-raw: a shape check follows
        where = [slice(None)] * value.tensor.ndim
        where[value.dim(axis)] = index
        changed = value.tensor.clone()
        changed[tuple(where)] = new.expand_as(value.tensor)[tuple(where)]
        return changed

    return change


# --8<-- [end:edit]
