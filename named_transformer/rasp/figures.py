"""A compiled program's attention maps, one panel per head, drawn with the library's
:func:`~named_transformer.plot.attention_heatmap` (matplotlib: the ``train`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from named_transformer.plot import attention_heatmap
from named_transformer.rasp.model import CompiledModel

__all__ = ["draw_attention"]


def draw_attention(
    model: CompiledModel, inputs: Sequence[Any], path: str | Path | None = None
) -> Any:
    """Every head's $\\mathsf{seq'} \\times \\mathsf{seq}$ weights on ``inputs``
    (BOS first), titled with the s-op it computes; saved to ``path`` when given."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    residuals, weights = model(model.encode([list(inputs)]))
    panels = [(w[0, h], label) for w, labels in zip(weights, model.heads, strict=True)
              for h, label in enumerate(labels)]  # fmt: skip
    size = len(inputs) + 1
    figure, axes = plt.subplots(
        1, len(panels), figsize=(0.55 * size * len(panels) + 1.5, 0.5 * size + 1.4),
        squeeze=False,
    )  # fmt: skip
    names = ["BOS", *(str(t) for t in inputs)]
    for ax, (pattern, label) in zip(axes[0], panels, strict=True):
        attention_heatmap(pattern.float(), names, names, ax=ax, title=label,
                          colorbar=False, annotate=size <= 7, fmt=".1f")  # fmt: skip
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=110)
        plt.close(figure)
    return figure
