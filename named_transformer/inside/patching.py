r"""Activation patching over a grid: every layer, every head (or position).

Run the model on one input (the *corrupted* one) while the value ``template`` of layer
$l$ takes, at entry $k$ of the axis ``over``, the value it had on another input (the
*clean* one, recorded in ``source``), or zero (``source=None``: ablation). The metric
of each run fills one cell:

$$\text{effect}[l, k] = \text{metric}\Big(\text{run}\big(X_{\text{corrupt}} \mid
  v^l_{k} \leftarrow v^l_{k}(X_{\text{clean}})\big)\Big).$$

The cells whose metric moves towards the clean run's are the ones that carry what
the clean input knows (Meng et al. 2022; Heimersheim & Nanda 2024).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.recording import Named, Record, edit, patch, record

__all__ = ["patching_grid"]


# --8<-- [start:patching_grid]
@checked
def patching_grid(
    model: nn.Module,
    run: Callable[[], Tensor],
    metric: Callable[[Tensor], Tensor | float],
    template: str,
    over: str,
    source: Record | None = None,
) -> Named:
    """``metric(run())`` with entry $k$ of axis ``over`` of ``template.format(l)``
    patched from ``source`` (zeroed when None), for every layer $l$ and entry $k$:
    ``layers over``. ``template``: ``"blocks.layers.{}.self_attention.attended"``
    with ``over="heads"``, or ``"blocks.layers.{}.attention_residual.inputs"`` with
    ``over="seq"``."""
    with torch.no_grad():
        with record(model, template.replace("{}", "*")) as shapes:
            run()
        found = shapes if source is None else source
        values = found.stack(template)  # layers *batch ... over ...
        entries = values.tensor.shape[
            Named(values.tensor[0], values.axes.split(" ", 1)[1]).dim(over)
        ]
        effects = torch.empty(len(values.tensor), entries)
        for layer in range(len(values.tensor)):
            clean = None if source is None else source[template.format(layer)]
            for entry in range(entries):
                with edit(model, {template.format(layer): patch(clean, over, entry)}):
                    effects[layer, entry] = float(metric(run()))
    return Named(effects, f"layers {over}")


# --8<-- [end:patching_grid]
