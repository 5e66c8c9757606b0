r"""The command line: train, evaluate, decode; embed and attend with a real model.

Train on a generated task, evaluate a checkpoint, decode an input; embed sentences and
draw attention maps with a real pretrained model.

    python -m named_transformer train copy
    python -m named_transformer evaluate runs/copy/checkpoint.pt
    python -m named_transformer decode runs/copy/checkpoint.pt "3141592653"
    python -m named_transformer embed "A man is eating." "Someone has a meal."
    python -m named_transformer attention "The cat sat on the mat." --out cat.png

``train`` uses the task's recipe (:data:`~named_transformer.workflows.runner.RECIPES`:
the size, dropout and learning rate that train it quickly on a laptop; ``--paper`` for
the paper's settings instead; any flag overrides either) and stops early once the
held-out score is perfect. It ends by printing the held-out score (``held-out exact
match: 100.0%``; for sentiment the accuracy on held-out reviews and on the negation
contrast set). Every command writes an attention-map figure unless ``--no-figure``
(matplotlib, in the ``train`` extra, as is tqdm for the progress bar on a terminal).
Every path a command will write (``--out``, ``--figure``, an export's target) is
checked before any work starts. Ctrl-C at any moment ends in one line and exit status
130; during training it finishes the step and saves a checkpoint that ``--resume``
continues from exactly (``--resume`` with no checkpoint is refused).
``embed`` and ``attention`` run the packaged all-MiniLM-L6-v2 (the ``pretrained``
extra; :mod:`named_transformer.workflows.pretrained`). The modules of these other
subcommands are named in :data:`COMMAND_MODULES` and imported when the parser is built
(:func:`register_commands` adds one), so none of them is imported back by this one.
Bad input ends in one line on stderr and a non-zero exit. Under
``torchrun --nproc_per_node=2`` the training runs data-parallel (gloo, CPU).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from named_transformer.workflows.data import Vocabulary
    from named_transformer.workflows.runner import RunSettings
    from named_transformer.workflows.spec import RunSpec

from named_transformer.workflows.recipes import (
    KINDS,
    PAPER,
    RECIPES,
    SIZES,
    add_text_options,
    position_choices,
)

# The parser imports no torch: ``--help`` and a usage mistake answer at once (importing
# torch takes seconds, far longer on a busy machine). Each command's handler imports
# what it runs. Under ``python -m named_transformer`` the command line is parsed before
# the package's own imports (:mod:`named_transformer._startup`).

__all__ = [
    "COMMAND_MODULES",
    "interrupted_line",
    "main",
    "parser",
    "register_commands",
    "writable_directory",
    "writable_file",
]

EXTRA = "pip install -e '.[train]' in a clone"

# The modules that add subcommands after train, evaluate and decode, in the order
# --help lists them. Each has ``add_commands(commands, formatter) -> list``, which adds
# its subcommands and returns those that take --no-shape-checks. They are imported by
# name when the parser is built, never by this module's imports: a command module may
# import this one (``require``) without making an import cycle.
COMMAND_MODULES: list[str] = [
    "named_transformer.exercises.commands",
    "named_transformer.workflows.pretrained",
    "named_transformer.workflows.export",
    "named_transformer.rasp.commands",
]


def register_commands(module: str) -> None:
    """Add the subcommands of ``module`` (a dotted name, with ``add_commands``) to
    the command line, after those already registered."""
    if module not in COMMAND_MODULES:
        COMMAND_MODULES.append(module)


def require(*modules: str) -> None:
    """Exit with a clear message when a module of the ``train`` extra is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(
            f"error: the command line needs {', '.join(missing)} "
            f"(attention figures: matplotlib; progress bar: tqdm), "
            f"which the `train` extra installs: {EXTRA}"
        )


def _creatable(path: Path, what: str) -> None:
    """The nearest existing folder above ``path`` is a folder we may write in."""
    above = next(p for p in path.absolute().parents if p.exists())
    if not above.is_dir():
        raise ValueError(f"{what} {path}: {above} is a file, so nothing can be "
                         "written under it")  # fmt: skip
    if not os.access(above, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path}: the folder {above} is not writable")


def writable_file(path: str | Path, what: str) -> Path:
    """``path`` as a file to (over)write: ValueError in one line, before any work,
    when it is a folder, sits under a file, or may not be written."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; give a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path} exists and is not writable")
    _creatable(path, what)
    return path


def writable_directory(path: str | Path, what: str) -> Path:
    """``path`` as a folder to write into (made if missing): ValueError in one line,
    before any work, when it is a file or cannot be made or written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file, not a folder")
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path} is not writable")
    if not path.is_dir():
        _creatable(path, what)
    return path


def _train_outputs(
    args: argparse.Namespace, task: str, files: Sequence[str], figure: str
) -> tuple[Path, Path | None]:
    """The run's folder and figure, every path checked before training; ``--resume``
    with no checkpoint to continue from is refused here too."""
    out = writable_directory(args.out or Path("runs") / task, "--out")
    for name in files:
        writable_file(out / name, "--out")
    path = _figure_path(args, out / figure)
    if path is not None:
        writable_file(path, "--figure")
    checkpoint = out / "checkpoint.pt"
    resume = getattr(args, "resume", False)
    if resume and not checkpoint.is_file():
        raise ValueError(
            f"--resume: there is no checkpoint at {checkpoint} to continue from "
            "(leave out --resume to start afresh)"
        )
    if not resume and checkpoint.is_file():  # said before it is lost, not after
        print(f"warning: this run replaces {checkpoint} when it saves (--resume "
              "would continue it instead)", file=sys.stderr, flush=True)  # fmt: skip
    return out, path


def _stamp(path: Path) -> tuple[int, int] | None:
    """What tells one version of a file from another: a save replaces the file (a
    new inode) and stamps its time."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns


def interrupted_line(
    interruption: KeyboardInterrupt, checkpoint: Path, before: tuple | None
) -> str:
    """The one line Ctrl-C ends a training command with: what was saved, if any.
    ``before`` is the checkpoint's :func:`_stamp` when the command started."""
    from named_transformer.workflows.training import TrainingInterrupted

    if isinstance(interruption, TrainingInterrupted):
        where = f"interrupted after step {interruption.step}"
        if interruption.checkpoint is None:
            return f"{where}, before this run saved a checkpoint"
        return (f"{where}; checkpoint: {interruption.checkpoint} (step "
                f"{interruption.checkpoint_step}); the same command with --resume "
                "continues exactly from there")  # fmt: skip
    now = _stamp(checkpoint)
    if now is not None and now != before:  # saved by this run: training had ended
        return (f"interrupted after training had ended; checkpoint: {checkpoint} "
                "(complete)")  # fmt: skip
    if now is not None:
        return (f"interrupted before training; {checkpoint} is unchanged (--resume "
                "continues from it)")  # fmt: skip
    return "interrupted before the first step; nothing was saved"


def _score_lines(results: dict) -> list[str]:
    if results["task"] == "sentiment":
        lines = [f"held-out accuracy: {100 * results['held_out']:.1f}%"]
        if "contrast" in results:
            lines.append(
                f"negation contrast accuracy: {100 * results['contrast']:.1f}%"
            )
        return lines
    return [f"held-out exact match: {100 * results['held_out']:.1f}%"]


def _figure(run: dict, source: Sequence[str], path: Path | None, title: str) -> None:
    if path is None:  # --no-figure
        return
    require("matplotlib")
    from named_transformer.workflows.runner import attention_figure, attention_maps
    from named_transformer.workflows.tasks import detokenize

    spec = run["spec"]
    prediction, maps = attention_maps(run["model"], spec, run["vocabulary"], source)
    if maps:
        what = detokenize(spec.task, prediction)
        attention_figure(maps, path, title=f"{title}: {what}")
        print(f"attention maps: {path}")
    else:
        print("attention maps: none (the bag-of-words model has no attention)")


def _figure_path(args: argparse.Namespace, default: Path) -> Path | None:
    return None if args.no_figure else Path(args.figure or default)


def _checked_figure(args: argparse.Namespace, default: Path) -> Path | None:
    path = _figure_path(args, default)
    return None if path is None else writable_file(path, "--figure")


def run_settings(args: argparse.Namespace) -> RunSettings:
    """The run's settings, built once: the task's recipe, or the paper's settings over
    it (``--paper``), then every flag given or with a default of its own."""
    from named_transformer.workflows.runner import RunSettings

    flags = {
        field.name: getattr(args, field.name)
        for field in fields(RunSettings)
        if getattr(args, field.name, None) is not None
    }
    return RunSettings.recipe(args.task, paper=args.paper, **flags)


def _train(args: argparse.Namespace) -> int:
    if not args.no_figure:
        require("matplotlib")  # before training, not after it
    if args.task == "induction":  # the attention-only model on repeated segments
        from named_transformer.workflows.induction import train_induction_command

        for given in ("resume", "max_seconds"):  # the recipe runs its steps in one go
            if getattr(args, given, None):
                flag = "--" + given.replace("_", "-")
                raise ValueError(f"{flag}: train induction takes no {flag}")
        _train_outputs(args, "induction", ["curves.json", "model.pt"], "curves.png")
        return train_induction_command(args)
    text = args.task == "text"  # real text, not a generated task
    settings = None if text else run_settings(args)
    files = ["checkpoint.pt"] + ([] if text else ["metrics.json"])
    out, figure = _train_outputs(args, args.task, files,
                                "loss.png" if text else "attention.png")  # fmt: skip
    checkpoint = out / "checkpoint.pt"
    before = _stamp(checkpoint)
    start = _start_line(args, settings, out)  # checks the model kind fits the task
    start = None if args.no_progress else start
    try:
        if text:  # says `start` once the corpus is read (one line if it is bad)
            from named_transformer.workflows.text import train_text_command

            return train_text_command(args, start)
        if start:  # the first line at once: making the data takes a while
            print(start, file=sys.stderr, flush=True)
        return _train_task(args, settings, out, figure)
    except KeyboardInterrupt as interrupted:
        print(interrupted_line(interrupted, checkpoint, before), file=sys.stderr)
        return 130


def _start_line(
    args: argparse.Namespace, settings: RunSettings | None, out: Path
) -> str:
    from named_transformer.workflows.spec import kind_for

    if settings is None:
        steps = getattr(args, "steps", None) or "3000"
        what = f"the text model on {args.corpus or 'the pydoc_data corpus'}"
    else:
        steps = settings.steps
        kind = kind_for(args.task, args.model).name
        what = f"a {settings.size} {kind} model on {args.task}"
    return (f"training {what} (at most {steps} steps) into {out}; Ctrl-C stops "
            "and saves a checkpoint")  # fmt: skip


def _train_task(
    args: argparse.Namespace, settings: RunSettings, out: Path, figure: Path | None
) -> int:
    from named_transformer.workflows.runner import held_out, train_task
    from named_transformer.workflows.tasks import detokenize

    run = train_task(args.task, args.model, settings=settings, directory=out,
                     progress=not args.no_progress, resume=args.resume)  # fmt: skip
    if run["trainer"].rank != 0:
        return 0
    results = run["results"]
    print(
        f"trained {results['kind']} ({results['parameters']:,} parameters) for "
        f"{results['steps']} steps in {results['seconds']:.0f} s; "
        f"checkpoint: {out / 'checkpoint.pt'}"
    )
    example = held_out(args.task, run["data"], 1)[0]
    title = detokenize(args.task, example.source)
    _figure(run, example.source, figure, title)
    for line in _score_lines(results):
        print(line)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from named_transformer.workflows.runner import (
        contrast_examples,
        evaluate_model,
        held_out,
        load_run,
    )
    from named_transformer.workflows.tasks import detokenize

    default = Path(args.checkpoint).with_name("attention-evaluate.png")
    figure = _checked_figure(args, default)
    run = load_run(args.checkpoint)
    model, spec, vocabulary = run["model"], run["spec"], run["vocabulary"]
    task = spec.task
    examples = held_out(task, run["data"], args.n)
    results = {
        "task": task,
        "held_out": evaluate_model(model, spec, vocabulary, examples),
    }
    if task == "sentiment":
        contrast = contrast_examples(args.n)
        results["contrast"] = evaluate_model(model, spec, vocabulary, contrast)
    title = detokenize(task, examples[0].source)
    _figure(run, examples[0].source, figure, title)
    print(f"{len(examples)} held-out examples of {task}, {spec.kind.name} "
          f"after {run['step']} steps")  # fmt: skip
    for line in _score_lines(results):
        print(line)
    return 0


def read_input(
    task: str, text: str, vocabulary: Vocabulary, trained: dict[str, int]
) -> tuple[str, ...]:
    """The tokens of ``text`` for ``task``, warning on stderr about what the model
    cannot read: characters or words outside its vocabulary, a length it never saw."""
    from named_transformer.workflows.data import START
    from named_transformer.workflows.tasks import TASKS, tokenize

    tokens, reads = tokenize(task, text), TASKS[task].reads
    if reads == "words":
        unknown = sorted({t for t in tokens if t not in vocabulary.stoi})
    elif reads == "characters":
        unknown = sorted({c for c in text.strip() if c not in vocabulary.stoi})
    else:  # digits: everything else is dropped (spaces between digits are fine)
        unknown = sorted({c for c in text if not (c.isdigit() or c.isspace())})
    if unknown:
        fate = "dropped" if reads == "digits" else "read as <unk>"
        print(f"warning: not in the vocabulary of {task}, so {fate}: "
              f"{' '.join(map(repr, unknown))}", file=sys.stderr)  # fmt: skip
    length = sum(t != START for t in tokens)
    low, high = trained["min_len"], trained["max_len"]
    if TASKS[task].lengths and length and not low <= length <= high:
        print(
            f"warning: the input has {length} tokens but the model was trained on "
            f"{low} to {high}; expect mistakes outside that range",
            file=sys.stderr,
        )
    return tokens


# A model without a position table reads any length, but its attention's work and
# memory grow with the square of it: beyond this, decode refuses rather than run
# for hours (100,000 digits would).
UNTABLED_LIMIT = 4096


def _within_positions(spec: RunSpec, source: Sequence[str], trained: dict) -> None:
    """Refuse, before decoding, a source longer than the model's learned positions
    (their ``max_positions``; a spec before 0.9 stored it for every scheme), or, with
    no table, longer than :data:`UNTABLED_LIMIT`."""
    from named_transformer.workflows.tasks import TASKS

    positions = spec.config.positions
    limit = getattr(positions, "max_positions", None) or spec.max_positions
    reader = "this model reads"
    if limit is None:
        limit = UNTABLED_LIMIT
        reader = f"decode reads, with {positions.kind} positions,"
    if len(source) > limit:
        seen = ""
        if TASKS[spec.task].lengths:
            seen = f" (it was trained on {trained['min_len']} to {trained['max_len']})"
        raise ValueError(
            f"the input has {len(source):,} tokens; {reader} at most {limit:,}{seen}"
        )


def _decode(args: argparse.Namespace) -> int:
    from named_transformer.workflows.data import START
    from named_transformer.workflows.runner import decode_examples, load_run
    from named_transformer.workflows.tasks import detokenize

    default = Path(args.checkpoint).with_name("attention-decode.png")
    figure = _checked_figure(args, default)
    run = load_run(args.checkpoint)
    spec = run["spec"]
    task = spec.task
    source = read_input(task, args.input, run["vocabulary"], run["data"])
    if not any(t != START for t in source):
        raise ValueError(f"{args.input!r} has no tokens for task {task!r}")
    _within_positions(spec, source, run["data"])
    (output,) = decode_examples(
        run["model"], spec, run["vocabulary"], [source], method=args.method,
        width=args.width, alpha=args.alpha, temperature=args.temperature,
        top_k=args.top_k, seed=args.seed,
    )  # fmt: skip
    print(detokenize(task, output))
    _figure(run, source, figure, detokenize(task, source))
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage mistakes end in one line (and exit status 2), not the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help; the recipes' table kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default is not None and action.default is not False
        if shown and action.default != argparse.SUPPRESS:
            text += " (default: %(default)s)"
        return text


def _recipe_table() -> str:
    rows = ["recipes (the defaults of --size, --dropout, --factor, --warmup, --steps):"]
    for task, recipe in RECIPES.items():
        rows.append(f"  {task:10} " + ", ".join(f"{k} {v}" for k, v in recipe.items()))
    paper = ", ".join(f"{k} {v}" for k, v in PAPER.items())
    rows.append(f"--paper: {paper} (the paper's settings)")
    return "\n".join(rows)


def _train_options(train: argparse.ArgumentParser) -> None:
    recipe = argparse.SUPPRESS  # unset: taken from the task's recipe
    add = train.add_argument
    add(
        "task",
        # every generated task has its recipe (a test checks): their names
        choices=[*sorted(RECIPES), "text", "induction"],
        help="the generated task, or text: the decoder-only model on real text "
        "(the text options below), or induction: watch an induction head form in "
        "a two-layer attention-only model",
    )
    add(
        "--model",
        choices=KINDS,
        help="model kind (default: encoder-decoder, or classifier for sentiment)",
    )
    add("--size", choices=sorted(SIZES), default=recipe, help="model size (recipe)")
    add(
        "--paper",
        action="store_true",
        help="the paper's dropout, learning-rate factor and warm-up (slow here)",
    )
    add(
        "--positions",
        choices=position_choices(),
        default="sinusoidal",
        help="how positions enter the model",
    )
    add("--steps", type=int, default=recipe, help="at most this many steps (recipe)")
    add("--seed", type=int, default=0, help="seeds the data, weights and batches")
    add("--out", help="output directory (default: runs/TASK)")
    add("--batch-size", type=int, default=recipe,
        help="examples per step (64; text: 32)")  # fmt: skip
    add("--layers", type=int, choices=[1, 2],
        help="induction: attention-only layers (2; 1 is the control)")  # fmt: skip
    add("--min-len", type=int, default=10, help="shortest digit sequence")
    add("--max-len", type=int, default=20, help="longest digit sequence")
    add("--train-size", type=int, default=50_000, help="training examples")
    add("--test-size", type=int, default=1000, help="held-out examples scored")
    add(
        "--eval-every",
        type=int,
        default=recipe,
        help="score the validation split every this many steps (100; text: 50)",
    )
    add(
        "--warmup",
        type=int,
        default=recipe,
        help="warm-up steps of the learning-rate schedule (recipe, else 400)",
    )
    add(
        "--factor",
        type=float,
        default=recipe,
        help="learning-rate factor of the schedule (recipe); 0.1 at width 64 and "
        "warm-up 400 peaks near the paper's 7e-4",
    )
    add("--dropout", type=float, default=recipe, help="dropout rate (recipe)")
    add("--no-progress", action="store_true", help="no progress output")
    add(
        "--resume",
        action="store_true",
        help="continue from OUT/checkpoint.pt (exactly) up to --steps; refused when "
        "there is no checkpoint there",
    )
    add_text_options(train)


def _decode_options(decode: argparse.ArgumentParser) -> None:
    add = decode.add_argument
    add("checkpoint", help="a checkpoint.pt written by train")
    add("input", help="the text to read, as the task writes it")
    add(
        "--method",
        choices=["greedy", "beam", "sample"],
        default="greedy",
        help="how to choose each next token",
    )
    add("--width", type=int, default=4, help="beam width")
    add("--alpha", type=float, default=0.6, help="beam length penalty α")
    add("--temperature", type=float, default=1.0, help="sampling T = 1/β")
    add("--top-k", type=int, default=None, help="sample among the k likeliest")
    add("--seed", type=int, default=0, help="seeds the sampling")


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m named_transformer``."""
    top = _Parser(
        prog="python -m named_transformer",
        description=__doc__.splitlines()[0],
        formatter_class=_Help,
    )
    commands = top.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train",
        help="train a model on a generated task",
        formatter_class=_Help,
        epilog=_recipe_table(),
    )
    _train_options(train)
    train.set_defaults(run=_train)

    evaluate = commands.add_parser(
        "evaluate", formatter_class=_Help, help="score a checkpoint on held-out data"
    )
    evaluate.add_argument("checkpoint", help="a checkpoint.pt written by train")
    evaluate.add_argument("--n", type=int, default=1000, help="held-out examples")
    evaluate.set_defaults(run=_evaluate)

    decode = commands.add_parser("decode", formatter_class=_Help,
                                 help="decode one input with a checkpoint")  # fmt: skip
    _decode_options(decode)
    decode.set_defaults(run=_decode)

    for command in (train, evaluate, decode):
        add = command.add_argument
        add(
            "--figure",
            help="where to write the attention maps (default: beside the checkpoint)",
        )
        add("--no-figure", action="store_true", help="draw no attention maps")
    added = []  # exercises adds none: init and check are always shape-checked
    for module in COMMAND_MODULES:
        added += importlib.import_module(module).add_commands(commands, _Help)
    for command in (train, evaluate, decode, *added):
        command.add_argument("--no-shape-checks", action="store_true",
                             help="turn runtime shape checks off (faster)")  # fmt: skip
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m named_transformer``; returns the exit status (130 after
    Ctrl-C, with one line saying so)."""
    args = None
    try:
        args = parser().parse_args(argv)
        from named_transformer.axes import shape_checks  # torch: once parsed

        with shape_checks(not args.no_shape_checks):
            status = args.run(args)
    except (ValueError, ImportError) as error:  # CheckpointError too: one line
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # training commands say what they saved themselves
        command = getattr(args, "command", None)
        print(f"interrupted: {command} stopped before it finished" if command
              else "interrupted while starting; nothing was done",
              file=sys.stderr)  # fmt: skip
        return 130
    distributed = sys.modules.get("torch.distributed")  # only if a command used it
    if distributed and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
