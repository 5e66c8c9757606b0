"""Export a trained checkpoint, or the packaged MiniLM, to ONNX with what a reader of
the graph needs beside it: the vocabulary, how text is read, the longest input.

    python -m named_transformer export runs/dates/checkpoint.pt dates.onnx
    python -m named_transformer export minilm minilm.onnx

The graph and its sidecar are written by :func:`~named_transformer.interop.onnx.
export_onnx`; this module adds the task's side (:func:`task_metadata`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

# torch and the runner are imported where they are used: the command line's parser
# reads add_commands without them (``--help`` answers at once)

__all__ = ["add_commands", "export_checkpoint", "export_minilm", "task_metadata"]


def task_metadata(run: dict[str, Any]) -> dict[str, Any]:
    """The sidecar entries of a run loaded by :func:`~named_transformer.workflows.
    runner.load_run`: title, example input, tokenizer, longest input, the range of
    lengths trained on (tasks whose lengths are set), labels or the most decoding
    steps."""
    from named_transformer.workflows.runner import held_out
    from named_transformer.workflows.sentiment import _TOKEN, LABELS
    from named_transformer.workflows.tasks import TASKS, detokenize, make_task

    spec, vocabulary, data = run["spec"], run["vocabulary"], run["data"]
    task, info = spec.task, TASKS[spec.task]
    lengths = {k: data[k] for k in ("min_len", "max_len")}
    seen = make_task(task, 2000, data["seed"], **lengths)  # what training drew
    example = held_out(task, dict(data), 1)[0]
    reads, writes = detokenize(task, example.source), detokenize(task, example.target)
    tokenizer: dict[str, Any] = {
        "reads": info.reads, "sep": info.sep, "start": info.start,
        "vocabulary": list(vocabulary.itos),
        **{s: getattr(vocabulary, s) for s in ("pad", "bos", "eos", "unk")},
    }  # fmt: skip
    if info.reads == "words":
        tokenizer |= {"pattern": _TOKEN.pattern, "lowercase": True}
    metadata = {
        "name": task, "title": f"{task}: {reads!r} → {writes!r}",
        "example": reads, "tokenizer": tokenizer,
        "max_length": max(len(e.source) for e in seen),
    }  # fmt: skip
    if info.lengths:  # the source lengths training drew from (the CLI warns outside)
        metadata["trained_lengths"] = {"min": data["min_len"], "max": data["max_len"]}
    if info.kind == "classify":
        return metadata | {"output": "label", "labels": list(LABELS)}
    return metadata | {"output": "tokens",
                       "max_steps": max(len(e.target) for e in seen) + 1}  # fmt: skip


def export_checkpoint(checkpoint: str | Path, out: str | Path) -> dict[str, Any]:
    """Export the model of a ``checkpoint.pt`` written by ``train`` to ``out``."""
    from named_transformer.interop.onnx import export_onnx
    from named_transformer.workflows.runner import load_run

    run = load_run(checkpoint)
    return export_onnx(run["model"], out, task_metadata(run))


def export_minilm(out: str | Path, folder: str | Path | None = None) -> dict[str, Any]:
    """Export the packaged all-MiniLM-L6-v2 (or the one in ``folder``) to ``out``,
    with its ``tokenizer.json`` beside it as ``<out stem>.tokenizer.json``."""
    from named_transformer.interop.onnx import export_onnx
    from named_transformer.pretrained.minilm import load_minilm

    encoder = load_minilm(folder)
    out = Path(out)
    tokenizer = out.with_name(f"{out.stem}.tokenizer.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.write_text(encoder.tokenizer.to_str())
    metadata = {
        "name": "minilm", "title": "all-MiniLM-L6-v2: a sentence → its embedding",
        "example": "The cat sat on the mat.", "output": "embedding",
        "tokenizer": {"reads": "wordpiece", "file": tokenizer.name},
        "max_length": encoder.tokenizer.truncation["max_length"],
    }  # fmt: skip
    return export_onnx(encoder, out, metadata)


def _check_targets(checkpoint: str, out: str | Path) -> list[Path]:
    """Every file the export will write, checked before the minutes of exporting:
    one line (exit status 2) for a folder in the way or a place that cannot be
    written. Returns them."""
    from named_transformer.workflows.cli import writable_file

    out = Path(out)
    targets = [out, out.with_suffix(".json")]
    if checkpoint == "minilm":
        targets.append(out.with_name(f"{out.stem}.tokenizer.json"))
    for target in targets:
        writable_file(target, "export target")
    if checkpoint != "minilm" and not Path(checkpoint).is_file():
        raise ValueError(f"no checkpoint at {checkpoint}")
    return targets


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        return path.stat().st_ino, path.stat().st_mtime_ns
    except OSError:
        return None


def _export(args: argparse.Namespace) -> int:
    targets = _check_targets(args.checkpoint, args.out)
    before = {target: _stamp(target) for target in targets}
    try:
        if args.checkpoint == "minilm":
            sidecar = export_minilm(args.out)
        else:
            sidecar = export_checkpoint(args.checkpoint, args.out)
    except KeyboardInterrupt:  # no half-written graph left to be mistaken for one
        for target in targets:
            if _stamp(target) != before[target]:
                target.unlink(missing_ok=True)
        raise
    out = Path(args.out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) and "
          f"{out.with_suffix('.json')}")  # fmt: skip
    for output in sidecar["outputs"]:
        print(f"  output {output['name']}")
    return 0


def add_commands(commands: Any, formatter: type) -> list[argparse.ArgumentParser]:
    """Add ``export`` to the command line's sub-commands."""
    export = commands.add_parser(
        "export", formatter_class=formatter,
        help="export a checkpoint (or 'minilm') to ONNX with its attention maps",
    )  # fmt: skip
    export.add_argument("checkpoint", help="a checkpoint.pt written by train, or "
                        "'minilm' for the packaged all-MiniLM-L6-v2")  # fmt: skip
    export.add_argument("out", help="the .onnx file to write (and .json beside it)")
    export.set_defaults(run=_export)
    return [export]
