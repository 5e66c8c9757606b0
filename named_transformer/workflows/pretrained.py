"""The command line's pretrained commands: the packaged all-MiniLM-L6-v2 and
SmolLM2-135M-Instruct.

    python -m named_transformer embed "A man is eating." "Someone has a meal."
    python -m named_transformer embed "first" "second" --json
    python -m named_transformer attention "The cat sat on the mat." --out cat.png
    python -m named_transformer chat "What is the capital of France?"
    python -m named_transformer generate "Once upon a time" --temperature 0.8 --seed 1

A checkpoint of ``train text`` continues a text too:
``generate runs/text/checkpoint.pt "To be"``.

``embed`` prints the cosine similarity of every pair of sentences (``--json``: the
sentences and their embeddings); ``attention`` draws every layer's and head's
attention weights over the sentence's word pieces. ``chat`` answers one question
with the chat template applied, ``generate`` continues a text; both print the tokens
as they come (greedy unless ``--temperature`` is above 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["add_commands"]


def _encoder():
    from named_transformer.pretrained.minilm import load_minilm

    print("loading all-MiniLM-L6-v2 ...", file=sys.stderr, flush=True)
    try:
        return load_minilm()
    except ModuleNotFoundError as missing:
        raise SystemExit(f"error: {missing}") from None


def _embed(args: argparse.Namespace) -> int:
    from named_transformer.contraction import einsum

    embeddings = _encoder().encode(args.sentences)
    if args.json:
        rows = [[round(x, 7) for x in row] for row in embeddings.tolist()]
        print(json.dumps({"sentences": args.sentences, "embeddings": rows}))
        return 0
    # unit-length embeddings: their dot products are the cosine similarities
    similarity = einsum(embeddings, embeddings, "query layer, key layer -> query key")
    for number, sentence in enumerate(args.sentences, start=1):
        print(f"{number:>3}  {sentence}")
    print("\ncosine similarity")
    print("     " + "".join(f"{n:>7}" for n in range(1, len(args.sentences) + 1)))
    for number, row in enumerate(similarity.tolist(), start=1):
        print(f"{number:>3}  " + "".join(f"{x:7.3f}" for x in row))
    return 0


def _attention(args: argparse.Namespace) -> int:
    from named_transformer.workflows.cli import require, writable_file

    require("matplotlib")
    writable_file(args.out, "--out")  # before the model loads
    from named_transformer.workflows.runner import attention_figure

    pieces, weights = _encoder().attention(args.sentence)
    maps = [
        (f"layer {number}", layer, pieces, pieces)
        for number, layer in enumerate(weights, start=1)
    ]
    title = f"all-MiniLM-L6-v2: {args.sentence}"
    print(f"attention maps: {attention_figure(maps, Path(args.out), title=title)}")
    return 0


def _loading(what: str, path: Path) -> float:
    """Say on stderr what is loading (it takes seconds, a minute on a busy machine);
    the time it started."""
    size = f", {path.stat().st_size / 1e6:,.0f} MB" if path.is_file() else ""
    print(f"loading {what} ({path}{size}) ...", file=sys.stderr, flush=True)
    return time.perf_counter()


def _loaded(started: float) -> None:
    print(f"loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr,
          flush=True)  # fmt: skip


def _language_model(args: argparse.Namespace):
    from named_transformer.pretrained.smollm2 import (
        load_gguf,
        load_smollm2,
        smollm2_path,
    )

    try:
        if args.gguf:
            started = _loading("the GGUF model", Path(args.gguf))
            model = load_gguf(args.gguf)
        else:
            started = _loading("SmolLM2-135M-Instruct", smollm2_path())
            model = load_smollm2()
    except ModuleNotFoundError as missing:
        raise SystemExit(f"error: {missing}") from None
    _loaded(started)
    return model


def _continue_checkpoint(args: argparse.Namespace) -> int:
    """``generate CHECKPOINT "prompt"``: a text model trained by ``train text``."""
    from named_transformer.workflows.text import generate_from_checkpoint

    if Path(args.checkpoint).is_file():  # else one line: no checkpoint there
        _loading("the text model", Path(args.checkpoint))
    print(generate_from_checkpoint(
        args.checkpoint, args.prompt,
        length=args.max_new_tokens or 300,
        temperature=0.8 if args.temperature is None else args.temperature,
        seed=0 if args.seed is None else args.seed,
    ))  # fmt: skip
    return 0


def _answer(args: argparse.Namespace) -> int:
    """``chat`` and ``generate``: the answer streamed to standard output."""
    from named_transformer.pretrained.smollm2 import Generation

    if args.command == "generate" and args.text is not None:
        args.checkpoint, args.prompt = args.prompt, args.text
        return _continue_checkpoint(args)
    settings = Generation(
        max_new_tokens=args.max_new_tokens or 128,
        temperature=args.temperature or 0.0, top_p=args.top_p, seed=args.seed,
    )  # fmt: skip
    if not args.prompt.strip():  # before the model loads: a mistake costs nothing
        raise ValueError("the prompt is empty")
    model = _language_model(args)
    write = getattr(model, args.command)

    def show(text: str) -> None:
        print(text, end="", flush=True)

    try:
        write(args.prompt, settings, on_text=show)
    finally:  # Ctrl-C too: the answer so far ends its line, before any message
        print(flush=True)
    return 0


def _add_generation(command) -> None:
    add = command.add_argument
    add("--max-new-tokens", type=int, default=None,
        help="stop after this many new tokens (default 128; a checkpoint's: 300)")
    add("--temperature", type=float, default=None,
        help="0 chooses greedily (SmolLM2's default); above 0 samples at that "
             "temperature (a checkpoint's default: 0.8)")  # fmt: skip
    add("--top-p", type=float, default=None,
        help="sample only from the nucleus of this probability (with --temperature)")
    add("--seed", type=int, default=None, help="makes the samples reproducible")
    add("--gguf", default=None,
        help="a llama.cpp GGUF file (llama or qwen2) instead of the packaged SmolLM2")


def add_commands(commands, formatter: type[argparse.HelpFormatter]) -> list:
    """Add ``embed``, ``attention``, ``chat`` and ``generate`` to the subcommands
    ``commands``."""

    def command(name: str, run, about: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, formatter_class=formatter, help=about)
        parser.set_defaults(run=run)
        return parser

    embed = command("embed", _embed,
                    "embed sentences with the packaged MiniLM; print their "
                    "similarities")  # fmt: skip
    embed.add_argument("sentences", nargs="+", help="the sentences to embed")
    embed.add_argument(
        "--json", action="store_true", help="print sentences and embeddings as JSON"
    )
    attention = command("attention", _attention,
                        "draw MiniLM's real attention maps of one sentence "
                        "(layers × heads)")  # fmt: skip
    attention.add_argument("sentence", help="the sentence to read")
    attention.add_argument("--out", default="attention.png", help="the PNG to write")
    chat = command("chat", _answer,
                   "ask the packaged SmolLM2-135M-Instruct one question "
                   "(chat template)")  # fmt: skip
    chat.add_argument("prompt", help="the question")
    generate = command("generate", _answer,
                       "continue a text with the packaged SmolLM2-135M-Instruct "
                       "(no template), or with a text model trained by `train "
                       "text` (CHECKPOINT first)")  # fmt: skip
    generate.add_argument(
        "prompt", help="the text to continue, or a `train text` checkpoint"
    )
    generate.add_argument(
        "text", nargs="?", default=None,
        help="after a checkpoint: the text it continues",
    )  # fmt: skip
    for parser in (chat, generate):
        _add_generation(parser)
    return [embed, attention, chat, generate]
