r"""The command line: train on a task, evaluate a checkpoint, decode an input.

    python -m named_transformer train copy --steps 2000 --out runs/copy \
        --no-shape-checks
    python -m named_transformer evaluate runs/copy/checkpoint.pt
    python -m named_transformer decode runs/copy/checkpoint.pt "3141592653"

``train`` ends by printing the held-out score (``held-out exact match: 100.0%``; for
sentiment the accuracy on held-out reviews and on the negation contrast set). Every
command writes an attention-map figure (encoder self, decoder self and cross-attention,
per layer and head). The figures need matplotlib and the progress bar tqdm: both are in
the ``train`` extra, ``pip install "named_transformer[train]"``. Under
``torchrun --nproc_per_node=2`` the training runs data-parallel (gloo, CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from named_transformer.axes import shape_checks
from named_transformer.workflows.tasks import TASKS, detokenize, tokenize
from named_transformer.workflows.training import CheckpointError

__all__ = ["main"]

EXTRA = 'pip install "named_transformer[train]"'


def require(*modules: str) -> None:
    """Exit with a clear message when a module of the ``train`` extra is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(
            f"error: the command line needs {', '.join(missing)} "
            f"(attention figures: matplotlib; progress bar: tqdm), "
            f"which the `train` extra installs: {EXTRA}"
        )


def _score_lines(results: dict) -> list[str]:
    if results["task"] == "sentiment":
        lines = [f"held-out accuracy: {100 * results['held_out']:.1f}%"]
        if "contrast" in results:
            lines.append(
                f"negation contrast accuracy: {100 * results['contrast']:.1f}%"
            )
        return lines
    return [f"held-out exact match: {100 * results['held_out']:.1f}%"]


def _figure(run: dict, source: Sequence[str], path: Path, title: str) -> None:
    from named_transformer.workflows.runner import attention_figure, attention_maps

    prediction, maps = attention_maps(
        run["model"], run["spec"], run["vocabulary"], source
    )
    if maps:
        attention_figure(
            maps, path, title=f"{title}: {detokenize(run['spec']['task'], prediction)}"
        )
        print(f"attention maps: {path}")
    else:
        print("attention maps: none (the bag-of-words model has no attention)")


def _train(args: argparse.Namespace) -> int:
    require("matplotlib", *(["tqdm"] if not args.no_progress else []))
    from named_transformer.workflows.runner import held_out, train_task

    out = Path(args.out or Path("runs") / args.task)
    run = train_task(
        args.task, args.model, args.size, steps=args.steps, seed=args.seed,
        directory=out, positions=args.positions, batch_size=args.batch_size,
        min_len=args.min_len, max_len=args.max_len, train_size=args.train_size,
        test_size=args.test_size, eval_every=args.eval_every, warmup=args.warmup,
        factor=args.factor, dropout=args.dropout, progress=not args.no_progress,
        resume=args.resume,
    )  # fmt: skip
    if run["trainer"].rank != 0:
        return 0
    results = run["results"]
    print(
        f"trained {results['kind']} ({results['parameters']:,} parameters) for "
        f"{results['steps']} steps in {results['seconds']:.0f} s; "
        f"checkpoint: {out / 'checkpoint.pt'}"
    )
    example = held_out(args.task, run["data"], 1)[0]
    _figure(
        run,
        example.source,
        out / "attention.png",
        detokenize(args.task, example.source),
    )
    for line in _score_lines(results):
        print(line)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    require("matplotlib")
    from named_transformer.workflows.runner import (
        contrast_examples,
        evaluate_model,
        held_out,
        load_run,
    )

    run = load_run(args.checkpoint)
    task = run["spec"]["task"]
    examples = held_out(task, run["data"], args.n)
    results = {
        "task": task,
        "held_out": evaluate_model(
            run["model"], run["spec"], run["vocabulary"], examples
        ),
    }
    if task == "sentiment":
        contrast = contrast_examples(args.n)
        results["contrast"] = evaluate_model(
            run["model"], run["spec"], run["vocabulary"], contrast
        )
    figure = Path(
        args.figure or Path(args.checkpoint).with_name("attention-evaluate.png")
    )
    _figure(run, examples[0].source, figure, detokenize(task, examples[0].source))
    print(f"{len(examples)} held-out examples of {task}, {run['spec']['kind']} "
          f"after {run['step']} steps")  # fmt: skip
    for line in _score_lines(results):
        print(line)
    return 0


def _decode(args: argparse.Namespace) -> int:
    require("matplotlib")
    from named_transformer.workflows.runner import decode_examples, load_run

    run = load_run(args.checkpoint)
    task = run["spec"]["task"]
    source = tokenize(task, args.input)
    if not source:
        raise SystemExit(f"error: {args.input!r} has no tokens for task {task!r}")
    (output,) = decode_examples(
        run["model"], run["spec"], run["vocabulary"], [source], method=args.method,
        width=args.width, alpha=args.alpha, temperature=args.temperature,
        top_k=args.top_k, seed=args.seed,
    )  # fmt: skip
    print(detokenize(task, output))
    figure = Path(
        args.figure or Path(args.checkpoint).with_name("attention-decode.png")
    )
    _figure(run, source, figure, detokenize(task, source))
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m named_transformer``."""
    from named_transformer.workflows.runner import KINDS, SIZES

    top = argparse.ArgumentParser(
        prog="python -m named_transformer", description=__doc__.splitlines()[0]
    )
    commands = top.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a model on a generated task")
    train.add_argument("task", choices=sorted(TASKS))
    train.add_argument(
        "--model",
        choices=KINDS,
        help="model kind (default: encoder-decoder, or classifier for sentiment)",
    )
    train.add_argument("--size", choices=sorted(SIZES), default="small")
    train.add_argument("--positions", choices=["sinusoidal", "learned", "relative"],
                       default="sinusoidal")  # fmt: skip
    train.add_argument(
        "--steps", type=int, default=3000, help="at most this many steps"
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", help="output directory (default runs/TASK)")
    train.add_argument("--batch-size", type=int, default=64)
    train.add_argument("--min-len", type=int, default=10)
    train.add_argument("--max-len", type=int, default=20)
    train.add_argument("--train-size", type=int, default=50_000)
    train.add_argument("--test-size", type=int, default=1000)
    train.add_argument("--eval-every", type=int, default=100)
    train.add_argument("--warmup", type=int, default=400)
    train.add_argument(
        "--factor",
        type=float,
        default=0.1,
        help=(
            "learning-rate factor of the warm-up schedule; 0.1 at width 64 and "
            "warm-up 400 peaks near the paper's 7e-4 (factor 1 is 10x that)"
        ),
    )
    train.add_argument(
        "--dropout",
        type=float,
        default=0.1,
        help="the paper's 0.1; 0 trains the generated tasks faster",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT/checkpoint.pt (exactly) up to --steps",
    )
    train.set_defaults(run=_train)

    evaluate = commands.add_parser(
        "evaluate", help="score a checkpoint on held-out data"
    )
    evaluate.add_argument("checkpoint")
    evaluate.add_argument("--n", type=int, default=1000, help="held-out examples")
    evaluate.add_argument("--figure", help="where to write the attention maps")
    evaluate.set_defaults(run=_evaluate)

    decode = commands.add_parser("decode", help="decode one input with a checkpoint")
    decode.add_argument("checkpoint")
    decode.add_argument("input")
    decode.add_argument(
        "--method", choices=["greedy", "beam", "sample"], default="greedy"
    )
    decode.add_argument("--width", type=int, default=4, help="beam width")
    decode.add_argument(
        "--alpha", type=float, default=0.6, help="beam length penalty α"
    )
    decode.add_argument(
        "--temperature", type=float, default=1.0, help="sampling T = 1/β"
    )
    decode.add_argument("--top-k", type=int, default=None)
    decode.add_argument("--seed", type=int, default=0)
    decode.add_argument("--figure", help="where to write the attention maps")
    decode.set_defaults(run=_decode)

    for command in (train, evaluate, decode):
        command.add_argument("--no-shape-checks", action="store_true",
                             help="turn runtime shape checks off (faster)")  # fmt: skip
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m named_transformer``; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        with shape_checks(not args.no_shape_checks):
            status = args.run(args)
    except CheckpointError as error:  # one line, no traceback: the file is the problem
        print(f"error: {error}", file=sys.stderr)
        return 2
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
