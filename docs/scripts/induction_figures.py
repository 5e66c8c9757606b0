"""Run the induction recipe and draw the page "Watch a circuit form".

    python docs/scripts/induction_figures.py   # docs/figures/induction/*

Trains the default two-layer attention-only model and the one-layer control, then
writes ``results.json`` (the curves of both, the ablations, the composition scores,
the phase change and the times), the figures ``curves.png`` and ``attention.png``
with the library's plotting code, and the trained two-layer model's weights
``model.pt``, which the page's examples and its live widget load.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from named_transformer.plot import attention_heatmap  # noqa: E402
from named_transformer.workflows.induction import (  # noqa: E402
    InductionSettings,
    ablation_effects,
    composition_scores,
    curves_figure,
    example_weights,
    phase_change,
    train_induction,
)

FIGURES = Path(__file__).resolve().parents[1] / "figures" / "induction"


def attention_figure(before, after, path: Path) -> None:
    """Every head's weights on one repeated sequence, before and after training."""
    heads = before[0].shape[0]
    fig, axes = plt.subplots(2, 2 * heads, figsize=(4 * heads * 2, 7.5))
    for row, (when, weights) in enumerate((("before", before), ("after", after))):
        for layer, layer_weights in enumerate(weights):
            for head in range(heads):
                ax = axes[row][layer * heads + head]
                attention_heatmap(layer_weights[head], ax=ax, annotate=False,
                                  colorbar=False,
                                  title=f"{when}: head {layer}.{head}")  # fmt: skip
                ax.set_xticks(range(0, layer_weights.shape[-1], 8))
                ax.set_yticks(range(0, layer_weights.shape[-1], 8))
                if row == 0:
                    ax.set_xlabel("")
                if layer * heads + head:
                    ax.set_ylabel("")
    fig.subplots_adjust(hspace=0.25, wspace=0.2)
    fig.colorbar(axes[0][0].images[0], ax=axes, shrink=0.6)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)


def rounded(value):
    """Floats to 4 decimals, throughout (a small JSON)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item) for item in value]
    return value


def main() -> None:
    FIGURES.mkdir(parents=True, exist_ok=True)
    settings = InductionSettings()
    start = time.perf_counter()
    model, two, before = train_induction(settings)
    seconds = time.perf_counter() - start
    after = example_weights(model, settings)
    start = time.perf_counter()
    _, one, _ = train_induction(InductionSettings(layers=1))
    control_seconds = time.perf_counter() - start
    phase = phase_change(two.step, two.best_induction())
    results = {
        "seconds": round(seconds, 1),
        "control_seconds": round(control_seconds, 1),
        "phase_change": phase,
        "composition": composition_scores(model),
        "ablations": ablation_effects(model, settings),
        "two_layers": two.to_json(),
        "one_layer": one.to_json(),
    }
    torch.save(model.state_dict(), FIGURES / "model.pt")  # 40 KB: the page loads it
    (FIGURES / "results.json").write_text(json.dumps(rounded(results)) + "\n")
    curves_figure(two, FIGURES / "curves.png", control=one, phase=phase)
    attention_figure(before, after, FIGURES / "attention.png")
    print(f"{seconds:.0f} s; phase change {phase}; final induction "
          f"{two.best_induction()[-1]:.2f}; one layer's best "
          f"{max(one.best_induction(0)):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
