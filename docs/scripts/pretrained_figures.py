"""Draw the real attention maps of all-MiniLM-L6-v2 shown on the pretrained page.

    python docs/scripts/pretrained_figures.py            # docs/figures/pretrained/*.png

The packaged MiniLM (``named_transformer.load_minilm``) reads one sentence; every
layer's twelve heads are drawn by the library's ``attention_figure``, one PNG per layer.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import named_transformer as nt  # noqa: E402
from named_transformer.workflows.runner import attention_figure  # noqa: E402

FIGURES = Path(__file__).resolve().parents[1] / "figures" / "pretrained"
SENTENCE = "The animal didn't cross the street because it was too tired."
# the figures this script draws: one per layer (name -> layer number)
FIGURE_MAKERS: dict[str, int] = {f"minilm-layer-{n}": n for n in range(1, 7)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIGURES, help="output folder")
    args = parser.parse_args()
    pieces, weights = nt.load_minilm().attention(SENTENCE)
    for name, number in FIGURE_MAKERS.items():
        maps = [(f"layer {number}", weights[number - 1], pieces, pieces)]
        path = args.out / f"{name}.png"
        print(attention_figure(maps, path, title=SENTENCE, width=16))


if __name__ == "__main__":
    main()
