r"""Pictures of named tensors: attention maps, tables and curves (matplotlib).

The docs figures are drawn by these functions from real runs of the library
(``docs/scripts/make_figures.py``). matplotlib is an optional dependency, imported only
when a function here is called: install it with the ``docs`` extra
(``pip install -e ".[docs]"``).

Each function draws into ``ax`` when given one, otherwise into a new figure, and
returns the ``Axes`` (its figure is ``ax.figure``). How a heatmap or a line plot looks
is one small object (:class:`HeatmapOptions`, :class:`LinePlotOptions`), whose fields
may also be given one by one as keywords (``annotate=False``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked

__all__ = [
    "HeatmapOptions",
    "LinePlotOptions",
    "attention_heatmap",
    "line_plot",
    "table_heatmap",
]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "named_transformer.plot needs matplotlib, which is in the `docs` extra: "
            'pip install -e ".[docs]" (or pip install matplotlib)'
        ) from error
    return plt


def _axes(ax: Any, figsize: tuple[float, float]) -> Any:
    if ax is not None:
        return ax
    _, ax = _pyplot().subplots(figsize=figsize, layout="constrained")
    return ax


def _numbers(values: Tensor | Iterable[float]) -> Any:
    import numpy as np

    if isinstance(values, Tensor):
        return values.detach().to("cpu").double().numpy()
    return np.asarray([float(v) for v in values])


_Options = TypeVar("_Options")


def _changed(options: _Options, changes: dict[str, Any], function: str) -> _Options:
    """``options`` with the fields named in ``changes`` replaced (a keyword that names
    no field is refused as Python refuses an unknown keyword)."""
    known = {field.name for field in fields(options)}
    for name in changes:
        if name not in known:
            raise TypeError(
                f"{function}() got an unexpected keyword argument {name!r} (options: "
                f"{', '.join(sorted(known))})"
            )
    return replace(options, **changes)


# --8<-- [start:attention_heatmap]
@dataclass(frozen=True)
class HeatmapOptions:
    """How :func:`attention_heatmap` draws: the colour map ``cmap`` from ``vmin`` to
    ``vmax``, a colour bar labelled ``colorbar_label`` (when ``colorbar``), each weight
    written in its cell in the format ``fmt`` (when ``annotate``)."""

    annotate: bool = True
    fmt: str = ".2f"
    cmap: str = "viridis"
    vmin: float = 0.0
    vmax: float = 1.0
    colorbar: bool = True
    colorbar_label: str = "attention weight"

    def __post_init__(self) -> None:
        if not self.vmin < self.vmax:
            raise ValueError(
                f"HeatmapOptions.vmax must be > vmin, got vmin={self.vmin}, "
                f"vmax={self.vmax}"
            )


@checked
def attention_heatmap(
    weights: Float[Tensor, "seq_q seq"],
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Any = None,
    title: str | None = None,
    options: HeatmapOptions | None = None,
    **changes: Any,
) -> Any:
    r"""Draw attention weights $A \in \mathbb R^{\mathsf{seq'} \times \mathsf{seq}}$ as
    a heatmap.

    Rows are queries ($\mathsf{seq'}$, axis label ``seq_q (queries)``), columns are
    keys ($\mathsf{seq}$, ``seq (keys)``), ticked with the tokens when given.
    ``options`` (:class:`HeatmapOptions`) say how it looks; ``changes`` are its fields
    given one by one (``annotate=False, cmap="magma"``), over ``options``. ``annotate``
    writes each weight in its cell (format ``fmt``). ``colorbar`` adds a colour bar
    from ``vmin`` to ``vmax``, labelled ``colorbar_label``; for a grid of panels on one
    scale, turn it off and draw one shared bar
    (``fig.colorbar(ax.images[0], ax=axes)``). A boolean mask draws the same way after
    ``mask.float()``.
    """
    options = _changed(options or HeatmapOptions(), changes, "attention_heatmap")
    ax = _axes(ax, (0.6 * weights.shape[1] + 2.0, 0.5 * weights.shape[0] + 1.2))
    grid = _numbers(weights)
    image = ax.imshow(
        grid, cmap=options.cmap, vmin=options.vmin, vmax=options.vmax, aspect="auto"
    )
    ax.set_xticks(range(grid.shape[1]), key_labels or range(grid.shape[1]))
    ax.set_yticks(range(grid.shape[0]), query_labels or range(grid.shape[0]))
    long_keys = bool(key_labels) and max(len(str(k)) for k in key_labels) > 2
    ax.tick_params(axis="x", labelrotation=45 if long_keys else 0)
    ax.set_xlabel("seq (keys)")
    ax.set_ylabel("seq_q (queries)")
    if options.annotate:
        middle = (options.vmin + options.vmax) / 2
        for row in range(grid.shape[0]):
            for column in range(grid.shape[1]):
                value = grid[row, column]
                colour = "black" if value > middle else "white"
                ax.text(
                    column,
                    row,
                    format(value, options.fmt),
                    ha="center",
                    va="center",
                    color=colour,
                    fontsize=8,
                )
    if title:
        ax.set_title(title)
    if options.colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8, label=options.colorbar_label)
    return ax


# --8<-- [end:attention_heatmap]


# --8<-- [start:table_heatmap]
@checked
def table_heatmap(
    table: Float[Tensor, "seq layer"],
    *,
    ax: Any = None,
    title: str | None = None,
    cmap: str = "RdBu",
    symmetric: bool = True,
    xlabel: str = "channel (layer)",
    ylabel: str = "position (seq)",
) -> Any:
    r"""Draw a table over $\mathsf{seq} \times \mathsf{layer}$ (positional encodings,
    embeddings).

    ``symmetric`` centres the colour scale on zero, so signs read at a glance.
    """
    ax = _axes(ax, (7.0, 3.5))
    grid = _numbers(table)
    limit = float(abs(grid).max()) if symmetric else None
    image = ax.imshow(
        grid,
        cmap=cmap,
        aspect="auto",
        interpolation="nearest",
        vmin=-limit if limit else None,
        vmax=limit,
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, shrink=0.8)
    return ax


# --8<-- [end:table_heatmap]


# --8<-- [start:line_plot]
@dataclass(frozen=True)
class LinePlotOptions:
    """How :func:`line_plot` draws: the axes' labels ``xlabel`` and ``ylabel``, a log
    scale on x (``logx``) or y (``logy``), a marker at every point (``markers``), and
    extra matplotlib line options per curve (``styles``: legend label → options,
    ``{"linestyle": "--"}`` for a reference curve)."""

    xlabel: str = ""
    ylabel: str = ""
    logx: bool = False
    logy: bool = False
    markers: bool = False
    styles: Mapping[str, Mapping[str, Any]] | None = None


@checked
def line_plot(
    x: Float[Tensor, " ..."] | Iterable[float],
    curves: Mapping[str, Float[Tensor, " ..."] | Iterable[float]],
    *,
    ax: Any = None,
    title: str | None = None,
    options: LinePlotOptions | None = None,
    **changes: Any,
) -> Any:
    """Draw named curves over a shared x (weights against β, variance against |key|,
    losses).

    ``x`` and each curve are 1-d: lists, arrays or tensors. ``curves`` maps each legend
    label to its y values, one per x. ``options`` (:class:`LinePlotOptions`) say how it
    looks; ``changes`` are its fields given one by one (``xlabel="β", logy=True``),
    over ``options``.
    """
    options = _changed(options or LinePlotOptions(), changes, "line_plot")
    ax = _axes(ax, (6.0, 3.6))
    xs = _numbers(x)
    for label, ys in curves.items():
        line = {"marker": "o" if options.markers else None, "markersize": 3}
        line.update((options.styles or {}).get(label, {}))
        ax.plot(xs, _numbers(ys), label=label, **line)
    ax.set_xscale("log" if options.logx else "linear")
    ax.set_yscale("log" if options.logy else "linear")
    ax.set_xlabel(options.xlabel)
    ax.set_ylabel(options.ylabel)
    if title:
        ax.set_title(title)
    if len(curves) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


# --8<-- [end:line_plot]
