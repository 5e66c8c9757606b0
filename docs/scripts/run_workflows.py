"""Train every workflow task for real, then draw the curves, attention maps and tables.

    # train (skips finished runs)
    python docs/scripts/run_workflows.py train copy dates ...
    # figures + tables for docs/
    python docs/scripts/run_workflows.py report
    # the whole thing in seconds (CI)
    python docs/scripts/run_workflows.py --quick --out /tmp/w

Runs go to ``--runs`` (default ``.cache/workflow-runs``, not committed): a checkpoint
and ``metrics.json`` each. ``report`` reads them and writes
``docs/scripts/workflow_results/*.md`` (tables the pages include; scripts/ is not a site
page) and ``docs/figures/workflows/*.png``. Headline runs use shape checks off and one
thread per process (run two processes side by side on 2 cores). ``--quick`` trains tiny
models for a few steps on a few examples: the numbers mean nothing, but every line of
the pipeline runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402

import named_transformer as nt  # noqa: E402
from named_transformer import plot  # noqa: E402
from named_transformer.workflows.runner import (  # noqa: E402
    attention_figure,
    attention_maps,
    contrast_examples,
    decode_examples,
    evaluate_model,
    held_out,
    load_run,
    train_task,
)
from named_transformer.workflows.tasks import detokenize  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# the attention maps' titles start with their kind; each kind gets its own figure
ATTENTION_KINDS = {
    "encoder self": "encoder",
    "decoder self": "decoder",
    "cross": "cross",
    "causal self": "causal",
}
LONG = (21, 40)  # the lengths of the length-generalisation test

# Learning-rate factor: 0.1 (the default) peaks near the paper's 7e-4 at width 64; the
# quick-to-learn tasks train at 0.3. Training stops once `target` of the 500 validation
# items are right in two evaluations in a row (dates: 99%, its target) or at the step
# cap.
FAST = {"factor": 0.3}
EXPERIMENTS: dict[str, dict] = {
    "copy": {
        "task": "copy",
        "kind": "encoder-decoder",
        "size": "tiny",
        "steps": 3000,
        **FAST,
    },
    "reverse": {
        "task": "reverse",
        "kind": "encoder-decoder",
        "size": "tiny",
        "steps": 6000,
        "factor": 0.15,
        "warmup": 200,
    },
    "sort": {"task": "sort", "kind": "encoder-decoder", "steps": 6000},
    "sort-decoder-only": {"task": "sort", "kind": "decoder-only", "steps": 6000},
    # histogram: the fast rate finds the counting solution, then a third of it
    # settles it
    "histogram": {
        "task": "histogram",
        "kind": "encoder-decoder",
        "steps": 10000,
        **FAST,
        "then": {"steps": 14000, "factor": 0.1},
    },  # fmt: skip
    "dates": {
        "task": "dates",
        "kind": "encoder-decoder",
        "steps": 4000,
        "target": 0.99,
        **FAST,
    },
    "sentiment": {"task": "sentiment", "kind": "classifier", "steps": 4000, **FAST},
    "sentiment-bag-of-words": {
        "task": "sentiment",
        "kind": "bag-of-words",
        "steps": 4000,
        "target": None,
        **FAST,
    },  # fmt: skip
    **{
        f"length-{positions}": {
            "task": "copy",
            "kind": "encoder-decoder",
            "steps": 4000,
            "positions": positions,
            "min_len": 1,
            "max_len": 20,
        }  # fmt: skip
        for positions in ("sinusoidal", "learned", "relative", "rotary", "alibi")
    },
}
# the quick mode covers every code path: each model kind, relative positions, the report
QUICK_NAMES = [
    "dates",
    "histogram",
    "sort-decoder-only",
    "sentiment",
    "sentiment-bag-of-words",
    "length-relative",
]
QUICK = {
    "size": "tiny", "steps": 4, "train_size": 64, "test_size": 8, "eval_every": 2,
    "eval_size": 4, "batch_size": 8, "warmup": 2, "progress": False,
}  # fmt: skip


def train(
    names: list[str], runs: Path, quick: bool, force: bool, resume: bool = False
) -> None:
    for name in names:
        directory = runs / name
        if (directory / "metrics.json").exists() and not (force or resume):
            print(f"{name}: done already ({directory})")
            continue
        full = {"progress": True, "batch_size": 64, "eval_every": 200, "dropout": 0.0}
        options = (
            {**EXPERIMENTS[name], **QUICK} if quick else {**full, **EXPERIMENTS[name]}
        )
        task, then = options.pop("task"), options.pop("then", None)
        phases = [options] if then is None else [options, {**options, **then}]
        for i, phase in enumerate(phases):
            if quick and i:
                phase["steps"] = 2 * QUICK["steps"]
            print(f"{name}: training {phase}", flush=True)
            # a later phase continues from the checkpoint (with its own learning rate)
            run = train_task(task, directory=directory, resume=resume or i > 0, **phase)
        results = run["results"]
        if name.startswith("length-"):
            data = {**run["data"], "min_len": LONG[0], "max_len": LONG[1]}
            long = held_out(task, data, 8 if quick else 1000)
            results["long"] = evaluate_model(
                run["model"], run["spec"], run["vocabulary"], long, max_len=LONG[1] + 5
            )
        results["history"] = [
            {"step": r.step, "loss": r.loss, **r.metrics}
            for r in run["trainer"].history
        ]
        (directory / "metrics.json").write_text(json.dumps(results, indent=2))
        print(
            f"{name}: "
            f"{json.dumps({k: v for k, v in results.items() if k != 'history'})}"
        )


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


ATTENDED = ("copy", "reverse", "sort-decoder-only", "dates", "sentiment",
            "length-relative")  # fmt: skip


def attention_figures(runs: Path, figures: Path, done: dict[str, dict]) -> None:
    """The attention maps of the trained models on one held-out example each: one
    figure per attention kind (its layers as rows), as wide as the page."""
    for n in ATTENDED:
        if n not in done:
            continue
        run = load_run(runs / n / "checkpoint.pt")
        example = held_out(done[n]["task"], {**run["data"]}, 1)[0]
        source = example.source if n != "sentiment" else contrast_examples(2)[1].source
        prediction, maps = attention_maps(
            run["model"], run["spec"], run["vocabulary"], source
        )
        task = done[n]["task"]
        reads, writes = detokenize(task, source), detokenize(task, prediction)
        title = f"{n}: {reads!r} → {writes!r}"
        for kind, slug in ATTENTION_KINDS.items():
            rows = [m for m in maps if m[0].startswith(kind)]
            if rows:
                attention_figure(rows, figures / f"attention-{n}-{slug}.png",
                                 title=title, width=9.0)  # fmt: skip


def report(runs: Path, docs: Path, names: list[str], quick: bool = False) -> None:
    figures, tables = (
        docs / "figures" / "workflows",
        docs / "scripts" / "workflow_results",
    )
    figures.mkdir(parents=True, exist_ok=True)
    tables.mkdir(parents=True, exist_ok=True)
    done = {n: json.loads((runs / n / "metrics.json").read_text())
            for n in names if (runs / n / "metrics.json").exists()}  # fmt: skip

    rows = [
        "| run | task | model | positions | parameters | steps | wall time "
        "| held-out |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for n, r in done.items():
        score = _percent(r["held_out"])
        if "contrast" in r:
            score += f" (contrast set: {_percent(r['contrast'])})"
        rows.append(
            f"| {n} | {r['task']} | {r['kind']} | {r['positions']} "
            f"| {r['parameters']:,} "
            f"| {r['steps']} | {r['seconds']:.0f} s | {score} |"
        )
    (tables / "summary.md").write_text("\n".join(rows) + "\n")

    length = [
        "| positions | held-out, lengths 1–20 | held-out, lengths 21–40 | steps |",
        "| --- | ---: | ---: | ---: |",
    ]
    for n, r in done.items():
        if n.startswith("length-"):
            length.append(f"| {r['positions']} | {_percent(r['held_out'])} "
                          f"| {_percent(r['long'])} | {r['steps']} |")  # fmt: skip
    (tables / "length.md").write_text("\n".join(length) + "\n")

    # learning curves: training loss and validation score against the step
    for group, members in {
        "curves-seq2seq": [
            "copy",
            "reverse",
            "sort",
            "sort-decoder-only",
            "histogram",
            "dates",
        ],
        "curves-sentiment": ["sentiment", "sentiment-bag-of-words"],
        "curves-length": [
            f"length-{p}"
            for p in ("sinusoidal", "learned", "relative", "rotary", "alibi")
        ],
    }.items():
        present = [m for m in members if m in done]
        if not present:
            continue
        plt = plot._pyplot()
        figure, (left, right) = plt.subplots(
            1, 2, figsize=(10, 3.6), layout="constrained"
        )
        for m in present:
            history = done[m]["history"]
            plot.line_plot(
                [h["step"] for h in history],
                {m: [h["loss"] for h in history]},
                ax=left,
                xlabel="step",
                ylabel="training loss (label-smoothed)",
            )
            scored = [h for h in history if "valid" in h]
            plot.line_plot(
                [h["step"] for h in scored],
                {m: [h["valid"] for h in scored]},
                ax=right,
                xlabel="step",
                ylabel="validation score",
            )
        left.legend(fontsize=7)
        right.legend(fontsize=7)
        figure.savefig(figures / f"{group}.png", dpi=90)
        plt.close(figure)

    attention_figures(runs, figures, done)

    # decoding: greedy, beam and sampling from the dates model
    if "dates" in done:
        run = load_run(runs / "dates" / "checkpoint.pt")
        inputs = [
            "Sunday, March 7, 2021",
            "the 1st of may 1999",
            "7.3.2021",
            "3/7/2021",
            "dec 25 1990",
            "29-Feb-2000",
        ]
        sources = [tuple(text) for text in inputs]
        lines = [
            "| input | greedy | beam (width 4) | sample T=0.5 | sample T=2, top-5 |",
            "| --- | --- | --- | --- | --- |",
        ]
        args = (run["model"], run["spec"], run["vocabulary"], sources)
        outputs = [
            decode_examples(*args, method="greedy"),
            decode_examples(*args, method="beam", width=4),
            decode_examples(*args, method="sample", temperature=0.5, seed=0),
            decode_examples(*args, method="sample", temperature=2.0, top_k=5, seed=0),
        ]
        for i, text in enumerate(inputs):
            cells = " | ".join(f"`{''.join(o[i])}`" for o in outputs)
            lines.append(f"| `{text}` | {cells} |")
        (tables / "decoding.md").write_text("\n".join(lines) + "\n")
        test = held_out("dates", run["data"], 8 if quick else 200)
        beam = evaluate_model(*args[:3], test, method="beam", width=4)
        greedy = evaluate_model(*args[:3], test)
        (tables / "decoding-scores.md").write_text(
            f"| method | exact match, {len(test)} held-out dates |\n| --- | ---: |\n"
            f"| greedy | {_percent(greedy)} |\n"
            f"| beam search, width 4, α = 0.6 | {_percent(beam)} |\n"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command",
        nargs="?",
        default="all",
        choices=["train", "report", "figures", "all"],
        help="figures: redraw only the attention maps of the finished runs",
    )
    parser.add_argument(
        "names", nargs="*", help=f"experiments (default all): {list(EXPERIMENTS)}"
    )
    parser.add_argument("--runs", type=Path, default=ROOT / ".cache" / "workflow-runs")
    parser.add_argument(
        "--quick", action="store_true", help="tiny models, a few steps (CI)"
    )
    parser.add_argument(
        "--out", type=Path, help="with --quick: where runs and outputs go"
    )
    parser.add_argument("--force", action="store_true", help="retrain finished runs")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue finished or interrupted runs from their checkpoints",
    )
    args = parser.parse_args(argv)
    names = args.names or (QUICK_NAMES if args.quick else list(EXPERIMENTS))
    unknown = set(names) - set(EXPERIMENTS)
    if unknown:
        parser.error(f"unknown experiments {sorted(unknown)}")
    runs, docs = args.runs, ROOT / "docs"
    if args.quick:
        out = args.out or Path("/tmp/run_workflows_quick")
        runs, docs = out / "runs", out / "docs"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.perf_counter()
    with nt.shape_checks(
        args.quick
    ):  # headline runs unchecked; the CI smoke run checked
        if args.command in ("train", "all"):
            train(names, runs, args.quick, args.force or args.quick, args.resume)
        if args.command in ("report", "all"):
            report(runs, docs, list(EXPERIMENTS), args.quick)
        if args.command == "figures":
            finished = {
                n: json.loads((runs / n / "metrics.json").read_text())
                for n in ATTENDED
                if (runs / n / "metrics.json").exists()
            }
            attention_figures(runs, docs / "figures" / "workflows", finished)
    torch.set_num_threads(threads)
    print(f"finished in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
