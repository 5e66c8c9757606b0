"""Draw the "Think like a Transformer" figures: every example program's compiled
attention maps, and the sort workflow's learned maps beside the compiled ones.

    python docs/scripts/rasp_figures.py            # rewrite docs/figures/rasp/*.png

The learned maps come from the trained sort run in ``.cache/workflow-runs/`` (train it
with ``python docs/scripts/run_workflows.py``); without it only the compiled maps are
drawn.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from named_transformer.plot import attention_heatmap  # noqa: E402
from named_transformer.rasp.compiler import compile_program  # noqa: E402
from named_transformer.rasp.figures import draw_attention  # noqa: E402
from named_transformer.rasp.programs import PROGRAMS, make_sort  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures" / "rasp"
SORT_RUN = ROOT / ".cache" / "workflow-runs" / "sort-decoder-only" / "checkpoint.pt"
# the figures this script draws (name -> what it shows)
FIGURE_MAKERS: dict[str, str] = {
    **{name: f"the compiled {name} program's attention maps" for name in PROGRAMS},
    "sort-learned-vs-compiled": "the learned sort beside the compiled one",
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


def learned_vs_compiled() -> Path | None:
    if not SORT_RUN.exists():
        return None
    from named_transformer.workflows.cli import read_input
    from named_transformer.workflows.runner import attention_maps, load_run

    run = load_run(SORT_RUN)
    source = read_input("sort", SORT_INPUT, run["vocabulary"], run["data"])
    prediction, maps = attention_maps(
        run["model"], run["spec"], run["vocabulary"], source
    )
    digits = [str(d) for d in range(10)]
    model = compile_program(make_sort(), digits, 12)
    tokens = SORT_INPUT.split()
    _, weights = model(model.encode([tokens]))
    panels = [(title, w) for title, w, *_ in maps]
    figure, axes = plt.subplots(2, 2, figsize=(13, 11))
    title, learned = panels[-1]
    for h, ax in enumerate(axes[0]):  # the learned model's last layer, two heads
        attention_heatmap(learned[h], maps[-1][2], maps[-1][3], ax=ax,
                          title=f"learned: {title}, head {h}", colorbar=False,
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


def main() -> None:
    FIGURES.mkdir(parents=True, exist_ok=True)
    for path in [*compiled_maps(), learned_vs_compiled()]:
        print(path)


if __name__ == "__main__":
    main()
