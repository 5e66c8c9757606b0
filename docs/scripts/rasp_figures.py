"""Draw the "Think like a Transformer" figures: every example program's compiled
attention maps, and the sort and histogram workflows' learned maps beside the
compiled ones.

    python docs/scripts/rasp_figures.py            # rewrite docs/figures/rasp/*.png

The learned maps come from the trained sort and histogram runs in
``.cache/workflow-runs/`` (train them with ``python docs/scripts/run_workflows.py
train sort-decoder-only histogram``); without them only the compiled maps are drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from named_transformer.plot import attention_heatmap  # noqa: E402
from named_transformer.rasp.compiler import compile_program  # noqa: E402
from named_transformer.rasp.figures import draw_attention  # noqa: E402
from named_transformer.rasp.programs import PROGRAMS, make_sort  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures" / "rasp"
RUNS = ROOT / ".cache" / "workflow-runs"
SORT_RUN = RUNS / "sort-decoder-only" / "checkpoint.pt"
HISTOGRAM_RUN = RUNS / "histogram" / "checkpoint.pt"
# the figures this script draws (name -> what it shows)
FIGURE_MAKERS: dict[str, str] = {
    **{name: f"the compiled {name} program's attention maps" for name in PROGRAMS},
    "sort-learned-vs-compiled": "the learned sort beside the compiled one",
    "histogram-learned-vs-compiled": "the learned histogram beside the compiled one",
}
# the comparison's input as the sort workflow writes it: the run trained on 10 to 20
SORT_INPUT = "3 1 4 1 5 9 2 6 5 3"


def compiled_maps() -> list[Path]:
    written = []
    for name, example in PROGRAMS.items():
        model = compile_program(example.program, example.vocabulary, example.max_length)
        path = FIGURES / f"{name}.png"
        draw_attention(model, list(example.example), path)
        written.append(path)
    return written


def _learned_and_compiled(run_path: Path, task: str, program: Any):
    """The trained run's greedy answer and attention maps on :data:`SORT_INPUT`, and
    the compiled program's attention weights on the same digits (BOS first)."""
    from named_transformer.workflows.cli import read_input
    from named_transformer.workflows.runner import attention_maps, load_run

    run = load_run(run_path)
    source = read_input(task, SORT_INPUT, run["vocabulary"], run["data"])
    prediction, maps = attention_maps(
        run["model"], run["spec"], run["vocabulary"], source
    )
    model = compile_program(program, [str(d) for d in range(10)], 12)
    _, weights = model(model.encode([SORT_INPUT.split()]))
    return prediction, maps, weights


def learned_vs_compiled() -> Path | None:
    if not SORT_RUN.exists():
        return None
    prediction, maps, weights = _learned_and_compiled(SORT_RUN, "sort", make_sort())
    tokens = SORT_INPUT.split()
    panels = [(title, w) for title, w, *_ in maps]
    figure, axes = plt.subplots(2, 2, figsize=(13, 11))
    title, learned = panels[-1]
    for h, ax in enumerate(axes[0]):  # the learned model's last layer, two heads
        attention_heatmap(learned[h], maps[-1][2], maps[-1][3], ax=ax,
                          title=f"learned: {title}, head {h + 1}", colorbar=False,
                          annotate=False)  # fmt: skip
    names = ["BOS", *tokens]
    for ax, w, label in zip(axes[1], weights, ["target", "sort"], strict=True):
        attention_heatmap(w[0, 0].float(), names, names, ax=ax,
                          title=f"compiled: {label}", colorbar=False,
                          annotate=False)  # fmt: skip
    figure.tight_layout()
    path = FIGURES / "sort-learned-vs-compiled.png"
    figure.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(figure)
    print("learned prediction:", prediction)
    return path


def _distance(learned: torch.Tensor, compiled: torch.Tensor) -> float:
    """Mean over queries of the total variation between two weight rows."""
    return float((learned - compiled).abs().sum(-1).mean() / 2)


def histogram_learned_vs_compiled() -> Path | None:
    """The compiled histogram's one head beside the learned encoder head closest to it
    (both read ``BOS digits``; total variation per query, averaged)."""
    if not HISTOGRAM_RUN.exists():
        return None
    prediction, maps, weights = _learned_and_compiled(
        HISTOGRAM_RUN, "histogram", PROGRAMS["histogram"].program
    )
    tokens = SORT_INPUT.split()
    compiled = weights[0][0, 0].float()
    encoder = [(t, h, w[h]) for t, w, *_ in maps if t.startswith("encoder")
               for h in range(w.shape[0])]  # fmt: skip
    for title, h, w in encoder:
        print(f"histogram: {title}, head {h + 1}: {_distance(w, compiled):.3f}")
    title, head, learned = min(encoder, key=lambda e: _distance(e[2], compiled))
    names = ["BOS", *tokens]
    figure, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    attention_heatmap(compiled, names, names, ax=axes[0], colorbar=False,
                      title="compiled: histogram", annotate=False)  # fmt: skip
    attention_heatmap(learned, names, names, ax=axes[1], colorbar=False,
                      annotate=False, title=f"learned: {title}, head {head + 1} "
                      f"(distance {_distance(learned, compiled):.2f})")  # fmt: skip
    figure.tight_layout()
    path = FIGURES / "histogram-learned-vs-compiled.png"
    figure.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(figure)
    print("learned prediction:", " ".join(prediction))
    return path


def main() -> None:
    FIGURES.mkdir(parents=True, exist_ok=True)
    drawn = [*compiled_maps(), learned_vs_compiled(), histogram_learned_vs_compiled()]
    for path in drawn:
        print(path)


if __name__ == "__main__":
    main()
