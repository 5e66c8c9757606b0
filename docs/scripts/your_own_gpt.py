"""The figure of "Your own GPT": the library's softmax against one over the wrong axis.

    python docs/scripts/your_own_gpt.py     # a few minutes on 2 cores

Trains the same small decoder-only model on pydoc's help topics twice from the same
seed (shape checks off, as headline runs are): once as the library is, once with
``nt.exercises.use`` switching ``softmax`` to a learner's that normalises over the
queries (``dim=-2``). Writes ``docs/figures/workflows/your-own-gpt.json`` (each run's
validation bits per character and a sample) and ``your-own-gpt-loss.png``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402

import named_transformer as nt  # noqa: E402
from named_transformer import plot  # noqa: E402
from named_transformer.workflows.text import (  # noqa: E402
    TextSettings,
    read_corpus,
    train_text,
)

OUT = Path(__file__).resolve().parents[1] / "figures" / "workflows"
SETTINGS = TextSettings(context=32, layers=2, layer=64, heads=4, batch_size=16,
                        steps=300, eval_every=25, warmup=50, target=0.01,
                        max_seconds=1e9, sample_every=0)  # fmt: skip


def wrong_softmax(scores, mask=None, beta=1.0):
    """The slip: normalised over the queries (the axis before last)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(beta * scores, dim=-2).nan_to_num(0.0)


def main() -> None:
    text = read_corpus(None)
    runs = {}
    with nt.shape_checks(False):
        runs["library softmax"] = train_text(text, SETTINGS, progress=False)
        with nt.exercises.use({"softmax": wrong_softmax}, names=["softmax"]):
            runs["softmax over the queries"] = train_text(text, SETTINGS,
                                                          progress=False)  # fmt: skip
    record = {
        "settings": SETTINGS.__dict__,
        "runs": {name: {"evaluations": run["evaluations"], "sample": run["sample"],
                        "seconds": round(run["seconds"], 1)}
                 for name, run in runs.items()},
    }  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "your-own-gpt.json").write_text(json.dumps(record, indent=1) + "\n")
    steps = [step for step, _ in runs["library softmax"]["evaluations"]]
    ax = plot.line_plot(
        steps,
        {name: [bpc for _, bpc in run["evaluations"]] for name, run in runs.items()},
        xlabel="step", ylabel="validation bits per character", markers=True,
        title="the same model, the same seed",
    )  # fmt: skip
    ax.figure.savefig(OUT / "your-own-gpt-loss.png", dpi=120, bbox_inches="tight")
    for name, run in record["runs"].items():
        print(name, run["evaluations"][-1], repr(run["sample"][:80]))


if __name__ == "__main__":
    main()
