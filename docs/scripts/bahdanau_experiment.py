"""Attention vs the fixed-length context: exact match by input length (Bahdanau et al.).

    # full run, rewrites docs/figures
    nice python docs/scripts/bahdanau_experiment.py
    # seconds (CI smoke run)
    python docs/scripts/bahdanau_experiment.py --quick --out /tmp/b
    # redraw the curves and the table from bahdanau-results.json (no training)
    python docs/scripts/bahdanau_experiment.py --redraw
    # retrain only the attention copy model and the dates model (same settings, seeds
    # and updates as the full run), redraw only the two alignment figures
    nice python docs/scripts/bahdanau_experiment.py --alignments

Three models of (nearly) the same size are trained on the same batches, in the same
order (the baselines, cheaper per update, for twice as many updates), on the ``copy``
task of :mod:`named_transformer.workflows.tasks` with source lengths spread over
5 … 40:

* ``attention``: :class:`~named_transformer.models.seq2seq.BahdanauSeq2Seq`
  (bidirectional GRU encoder, additive alignment);
* ``fixed context``: :class:`~named_transformer.models.seq2seq.RNNEncoderDecoder`, the
  decoder sees only the encoder's last state $c$;
* ``fixed context, reversed source``: the same with Sutskever et al.'s reversal.

Each is scored by greedy decoding on held-out sources of every length (exact match of
the whole output, ``<eos>`` included). A smaller attention model is then trained on the
``dates`` task and its alignment matrices $\\alpha$ are drawn. Everything is written to
``docs/figures/bahdanau-*`` (``--out`` elsewhere): the figures,
``bahdanau-results.json`` and ``bahdanau-table.txt`` (the Markdown table the docs page
includes). ``--redraw`` reads ``bahdanau-results.json`` back and redraws what it holds
(the length curves, the loss curves when the run saved them, the table); the alignment
figures need the trained models, so only a full run or ``--alignments`` redraws them.
``--alignments`` trains just the two models they show, exactly as the full run does
(teacher forcing 1.0 draws no random numbers, so training the baselines first changes
nothing), draws ``bahdanau-copy-alignment.png`` and ``bahdanau-dates.png`` and writes
nothing else; it prints its scores next to those ``bahdanau-results.json`` holds.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from einops import rearrange  # noqa: E402

import named_transformer as nt  # noqa: E402
from named_transformer import plot  # noqa: E402
from named_transformer.models.seq2seq import (  # noqa: E402
    BahdanauSeq2Seq,
    RNNEncoderDecoder,
)
from named_transformer.workflows.batches import collate  # noqa: E402
from named_transformer.workflows.tasks import make_task, task_vocabulary  # noqa: E402

FIGURES = Path(__file__).resolve().parents[1] / "figures"

FULL = dict(
    steps=1500, baseline_steps=3000, batch=64, lr=3e-3, min_len=5, max_len=40, spread=2,
    eval_per_length=40,
    layer=32, hidden=64, attention=32, teacher_forcing=1.0,
    dates_steps=600, dates_hidden=48, dates_layer=24, dpi=110,
)  # fmt: skip
QUICK = dict(
    steps=2, baseline_steps=3, batch=4, lr=3e-3, min_len=5, max_len=7, spread=1,
    eval_per_length=1,
    layer=8, hidden=8, attention=8, teacher_forcing=0.9,
    dates_steps=1, dates_hidden=8, dates_layer=8, dpi=30,
)  # fmt: skip
MODELS = ("attention", "fixed context", "fixed context, reversed source")
# one colour per model in every figure of the page (those of the first loss figure)
MODEL_COLOURS = {
    "attention": "C2",
    "fixed context": "C0",
    "fixed context, reversed source": "C1",
}


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_models(vocab: int, cfg: dict) -> dict[str, torch.nn.Module]:
    """The attention model, and baselines whose width makes their size the closest
    to it."""
    torch.manual_seed(0)
    attention = BahdanauSeq2Seq(
        vocab, cfg["layer"], cfg["hidden"], attention=cfg["attention"]
    )
    target = parameters(attention)
    width = min(
        range(4, 8 * cfg["hidden"]),
        key=lambda h: abs(
            parameters(RNNEncoderDecoder(vocab, cfg["layer"], h)) - target
        ),
    )
    models = {"attention": attention}
    for name, reverse in zip(MODELS[1:], (False, True), strict=True):
        torch.manual_seed(0)
        models[name] = RNNEncoderDecoder(
            vocab, cfg["layer"], width, reverse_source=reverse
        )
    return models


def copy_batch(step: int, cfg: dict, vocab):
    """Batch ``step``: sources of lengths around one random centre, so little
    padding."""
    centre = random.Random(f"centre/{step}").randint(cfg["min_len"], cfg["max_len"])
    low = max(cfg["min_len"], centre - cfg["spread"])
    high = min(cfg["max_len"], centre + cfg["spread"])
    examples = make_task("copy", cfg["batch"], seed=step, min_len=low, max_len=high)
    return collate(examples, vocab)


def dates_batch(step: int, cfg: dict, vocab):
    return collate(make_task("dates", cfg["batch"], seed=step), vocab)


def logits_of(model, batch, teacher_forcing: float):
    out = model(batch.source, batch.source_lengths, batch.target_out, teacher_forcing)
    return out[0] if isinstance(out, tuple) else out


def train(model, make_batch, steps: int, cfg: dict, vocab, label: str) -> dict:
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    # constant for the first half, then linear decay to a tenth: the same shape for
    # every model
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, 1.0 - 1.8 * (step / steps - 0.5))
    )
    losses, start = [], time.time()
    for step in range(steps):
        batch = make_batch(step, cfg, vocab)
        logits = logits_of(model, batch, cfg["teacher_forcing"])
        loss = torch.nn.functional.cross_entropy(
            rearrange(logits, "batch seq_q vocab -> (batch seq_q) vocab"),
            rearrange(batch.target_out, "batch seq_q -> (batch seq_q)"),
            ignore_index=vocab.pad,
        )
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            print(
                f"  {label:32s} step {step:4d}  loss {loss.item():.4f}  "
                f"{time.time() - start:6.0f}s",
                flush=True,
            )
    return {"losses": losses, "seconds": time.time() - start}


@torch.no_grad()
def decode(model, batch, extra: int = 3):
    steps = int(batch.target_out.shape[-1]) + extra
    out = model.greedy_decode(batch.source, batch.source_lengths, steps)
    return out if isinstance(out, tuple) else (out, None)


def exact_matches(model, examples, vocab) -> list[bool]:
    batch = collate(examples, vocab)
    tokens, _ = decode(model, batch)
    matches = []
    for row, example in zip(tokens.tolist(), examples, strict=True):
        finished = vocab.eos in row
        matches.append(finished and vocab.decode(row) == tuple(example.target))
    return matches


def length_curve(model, cfg: dict, vocab) -> dict[int, float]:
    model.eval()
    curve = {}
    for length in range(cfg["min_len"], cfg["max_len"] + 1):
        examples = make_task(
            "copy",
            cfg["eval_per_length"],
            seed=1,
            split="test",
            min_len=length,
            max_len=length,
        )
        matches = exact_matches(model, examples, vocab)
        curve[length] = sum(matches) / len(matches)
    model.train()
    return curve


def buckets(cfg: dict) -> list[tuple[int, int]]:
    low, high = cfg["min_len"], cfg["max_len"]
    edges = [(low, min(10, high))] + [
        (a, min(a + 4, high)) for a in range(11, high + 1, 5)
    ]
    return [(a, b) for a, b in edges if a <= b]


def table(results: dict, cfg: dict) -> str:
    names = list(results["models"])
    lines = [
        "| source length | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " |",
    ]
    for a, b in buckets(cfg):
        cells = []
        for name in names:
            curve = results["models"][name]["exact_match"]
            values = [curve[str(n)] for n in range(a, b + 1)]
            cells.append(f"{100 * sum(values) / len(values):.1f} %")
        lines.append(f"| {a}–{b} | " + " | ".join(cells) + " |")
    for key, label in (
        ("parameters", "parameters"),
        ("updates", f"updates of {cfg['batch']}"),
        ("train_seconds", "training wall time"),
    ):
        cells = [
            f"{results['models'][n][key]:.0f} s"
            if key == "train_seconds"
            else f"{results['models'][n][key]:,}"
            for n in names
        ]
        lines.append(f"| *{label}* | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def length_figure(results: dict, path: Path, dpi: int) -> None:
    curves = {
        name: [v for _, v in sorted((int(k), v) for k, v in r["exact_match"].items())]
        for name, r in results["models"].items()
    }
    lengths = sorted(int(k) for k in results["models"]["attention"]["exact_match"])
    ax = plot.line_plot(
        lengths,
        curves,
        markers=True,
        styles={name: {"color": MODEL_COLOURS[name]} for name in curves},
        xlabel="source length (digits)",
        ylabel="exact match (greedy)",
        title="Copying digit strings: attention vs a fixed-length context",
    )
    ax.set_ylim(-0.03, 1.03)
    ax.figure.savefig(path, dpi=dpi)
    plt.close(ax.figure)


def loss_figure(histories: dict[str, list[float]], path: Path, dpi: int) -> None:
    window = 50
    ax = None
    for name, h in histories.items():
        smooth = [
            sum(h[max(0, i - window + 1) : i + 1])
            / len(h[max(0, i - window + 1) : i + 1])
            for i in range(len(h))
        ]
        ax = plot.line_plot(
            range(1, len(h) + 1),
            {name: smooth},
            ax=ax,
            logy=True,
            styles={name: {"color": MODEL_COLOURS[name]}},
            xlabel="update",
            ylabel="cross-entropy (nats)",
            title=f"Training loss (mean of the last {window} updates)",
        )
    ax.legend(list(histories), fontsize=8)
    ax.figure.savefig(path, dpi=dpi)
    plt.close(ax.figure)


def alignment_figure(
    model, examples, vocab, path: Path, title: str, columns: int, dpi: int
) -> None:
    batch = collate(examples, vocab)
    model.eval()
    tokens, weights = decode(model, batch)
    rows = (len(examples) + columns - 1) // columns
    longest = max(int(weights.shape[1]), max(len(e.source) for e in examples))
    panel = max(3.6, 0.17 * longest + 1.2)  # ≥ 0.17 in a token: labels never overlap
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(min(panel * columns + 1.0, 10.0), panel * rows * 0.85 + 0.4),
        layout="constrained",
        squeeze=False,
    )
    for i, example in enumerate(examples):
        source = list(example.source)
        output = list(vocab.decode(tokens[i].tolist(), strip=False))
        out_len = output.index("<eos>") + 1 if "<eos>" in output else len(output)
        ax = axes[i // columns][i % columns]
        plot.attention_heatmap(
            weights[i, :out_len, : len(source)],
            [("␣" if t == " " else t) for t in output[:out_len]],
            [("␣" if t == " " else t) for t in source],
            ax=ax,
            annotate=False,
            colorbar=False,
            title="".join(source),
        )
        ax.tick_params(axis="x", labelrotation=0)
        ax.tick_params(labelsize=8)
        ax.set_xlabel("seq (source position i)")
        ax.set_ylabel("seq_q (output position j)")
    for j in range(len(examples), rows * columns):
        axes[j // columns][j % columns].axis("off")
    fig.colorbar(
        axes[0][0].images[0], ax=axes.ravel().tolist(), shrink=0.8, label="α (weight)"
    )
    fig.suptitle(title)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    model.train()


def fit_copy(name: str, model, cfg: dict, vocab) -> dict:
    """Train copy model ``name`` with its budget, score it by length: its results
    entry."""
    steps = cfg["steps"] if name == "attention" else cfg["baseline_steps"]
    print(
        f"training {name} ({parameters(model):,} parameters, {steps} updates)",
        flush=True,
    )
    trained = train(model, copy_batch, steps, cfg, vocab, name)
    curve = length_curve(model, cfg, vocab)
    short = [v for n, v in curve.items() if n <= 10]
    print(
        f"  exact match ≤10: {100 * sum(short) / len(short):.1f} %, "
        f"all: {100 * sum(curve.values()) / len(curve):.1f} %",
        flush=True,
    )
    return {
        "parameters": parameters(model),
        "updates": steps,
        "train_seconds": round(trained["seconds"], 1),
        "final_loss": sum(trained["losses"][-20:]) / len(trained["losses"][-20:]),
        "exact_match_up_to_10": sum(short) / len(short),
        "exact_match": {str(n): v for n, v in curve.items()},
        "losses": [float(f"{loss:.5g}") for loss in trained["losses"]],
    }


def fit_dates(cfg: dict, quick: bool):
    """The smaller attention model trained on ``dates``: (model, vocabulary, its
    results entry)."""
    date_vocab = task_vocabulary("dates")
    torch.manual_seed(0)
    dates_model = BahdanauSeq2Seq(
        len(date_vocab),
        cfg["dates_layer"],
        cfg["dates_hidden"],
        attention=cfg["dates_hidden"],
    )
    print(f"training dates ({parameters(dates_model):,} parameters)", flush=True)
    trained = train(
        dates_model, dates_batch, cfg["dates_steps"], cfg, date_vocab, "dates"
    )
    held_out = make_task("dates", 2 if quick else 200, seed=3, split="test")
    dates_model.eval()
    date_matches = exact_matches(dates_model, held_out, date_vocab)
    dates_model.train()
    return (
        dates_model,
        date_vocab,
        {
            "parameters": parameters(dates_model),
            "train_seconds": round(trained["seconds"], 1),
            "exact_match": sum(date_matches) / len(date_matches),
            "test_examples": len(date_matches),
        },
    )


def copy_alignment_figure(model, cfg: dict, vocab, out: Path) -> None:
    """``bahdanau-copy-alignment.png``: α of the attention model on one held-out
    28-digit copy."""
    length = min(28, cfg["max_len"])
    long_copy = make_task(
        "copy", 1, seed=7, split="test", min_len=length, max_len=length
    )
    alignment_figure(
        model,
        long_copy,
        vocab,
        out / "bahdanau-copy-alignment.png",
        "α for copying: the diagonal",
        columns=1,
        dpi=cfg["dpi"],
    )


def dates_alignment_figure(model, cfg: dict, vocab, out: Path, quick: bool) -> None:
    """``bahdanau-dates.png``: α for four held-out dates, from shortest to
    longest."""
    shown = make_task("dates", 4 if quick else 40, seed=11, split="test")
    by_length = sorted(shown, key=lambda e: len(e.source))
    picks = (
        [by_length[len(by_length) * q // 4] for q in (0, 1, 2, 3)]
        if len(shown) >= 4
        else shown
    )
    alignment_figure(
        model,
        picks,
        vocab,
        out / "bahdanau-dates.png",
        "α for dates: which source characters each output character reads",
        columns=2,
        dpi=cfg["dpi"],
    )


def alignments(cfg: dict, out: Path, quick: bool) -> None:
    """Train only the attention copy model and the dates model, as the full run does,
    and draw only their two alignment figures."""
    vocab = task_vocabulary("copy")
    attention = build_models(len(vocab), cfg)["attention"]
    copy_entry = fit_copy("attention", attention, cfg, vocab)
    copy_alignment_figure(attention, cfg, vocab, out)
    print(out / "bahdanau-copy-alignment.png", flush=True)
    dates_model, date_vocab, dates_entry = fit_dates(cfg, quick)
    dates_alignment_figure(dates_model, cfg, date_vocab, out, quick)
    print(out / "bahdanau-dates.png")
    saved = out / "bahdanau-results.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    if results.get("config") != cfg:
        return  # nothing saved with these settings to compare with
    saved_curve = results["models"]["attention"]["exact_match"]
    same_curve = saved_curve == copy_entry["exact_match"]
    print(
        f"copy exact-match curve {'equals' if same_curve else 'DIFFERS FROM'} the "
        f"saved one; dates exact match {100 * dates_entry['exact_match']:.1f} % "
        f"(saved: {100 * results['dates']['exact_match']:.1f} %); "
        f"{saved.name} left as it is"
    )


def redraw(out: Path) -> None:
    """Redraw the figures and the table that ``bahdanau-results.json`` holds enough
    for."""
    results = json.loads((out / "bahdanau-results.json").read_text())
    cfg = results["config"]
    length_figure(results, out / "bahdanau-length.png", cfg["dpi"])
    print(out / "bahdanau-length.png")
    histories = {n: r["losses"] for n, r in results["models"].items() if "losses" in r}
    if len(histories) == len(results["models"]):
        loss_figure(histories, out / "bahdanau-loss.png", cfg["dpi"])
        print(out / "bahdanau-loss.png")
    else:
        print("bahdanau-loss.png kept: the results hold no loss histories (rerun)")
    (out / "bahdanau-table.txt").write_text(table(results, cfg))
    print(out / "bahdanau-table.txt")
    print("alignment figures kept: they need the trained models (--alignments)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny models, a few updates"
    )
    parser.add_argument("--out", type=Path, default=FIGURES, help="where figures go")
    parser.add_argument(
        "--steps", type=int, help="override the number of updates (copy)"
    )
    parser.add_argument(
        "--redraw",
        action="store_true",
        help="redraw the curves and the table from bahdanau-results.json in --out "
        "(no training)",
    )
    parser.add_argument(
        "--alignments",
        action="store_true",
        help="train only the attention copy model and the dates model (as the full "
        "run does) and redraw only the two alignment figures in --out",
    )
    parser.add_argument(
        "--shape-checks",
        action="store_true",
        help="keep runtime shape checks on (default: on with --quick only)",
    )
    args = parser.parse_args(argv)
    if args.redraw:
        redraw(args.out)
        return
    cfg = dict(QUICK if args.quick else FULL)
    if args.steps is not None:
        cfg["steps"] = args.steps
    nt.shape_checks(args.shape_checks or args.quick)
    torch.set_num_threads(
        1
    )  # small sequential RNN steps: one thread is fastest on a shared CPU
    args.out.mkdir(parents=True, exist_ok=True)
    if args.alignments:
        started = time.time()
        alignments(cfg, args.out, args.quick)
        print(f"wall time {time.time() - started:.0f} s")
        return
    started = time.time()

    vocab = task_vocabulary("copy")
    models = build_models(len(vocab), cfg)
    results = {"config": cfg, "models": {}}
    histories = {}
    for name in (*MODELS[1:], MODELS[0]):  # the cheap baselines first
        results["models"][name] = fit_copy(name, models[name], cfg, vocab)
        histories[name] = results["models"][name]["losses"]

    results["models"] = {name: results["models"][name] for name in MODELS}
    length_figure(results, args.out / "bahdanau-length.png", cfg["dpi"])
    loss_figure(histories, args.out / "bahdanau-loss.png", cfg["dpi"])
    copy_alignment_figure(models["attention"], cfg, vocab, args.out)
    # dates: a smaller attention model, then its alignment matrices
    dates_model, date_vocab, results["dates"] = fit_dates(cfg, args.quick)
    dates_alignment_figure(dates_model, cfg, date_vocab, args.out, args.quick)
    results["wall_seconds"] = round(time.time() - started, 1)
    (args.out / "bahdanau-results.json").write_text(
        json.dumps(results, indent=1) + "\n"
    )
    (args.out / "bahdanau-table.txt").write_text(table(results, cfg))
    print(table(results, cfg))
    print(
        f"dates: exact match {100 * results['dates']['exact_match']:.1f} % on "
        f"{results['dates']['test_examples']} held-out dates; "
        f"wall time {results['wall_seconds']:.0f} s"
    )


if __name__ == "__main__":
    main()
