"""The command line's pretrained commands, run by the packaged all-MiniLM-L6-v2.

    python -m named_transformer embed "A man is eating." "Someone has a meal."
    python -m named_transformer embed "first" "second" --json
    python -m named_transformer attention "The cat sat on the mat." --out cat.png

``embed`` prints the cosine similarity of every pair of sentences (``--json``: the
sentences and their embeddings); ``attention`` draws every layer's and head's
attention weights over the sentence's word pieces.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from einops import einsum

__all__ = ["add_commands"]


def _encoder():
    from named_transformer.pretrained.minilm import load_minilm

    try:
        return load_minilm()
    except ModuleNotFoundError as missing:
        raise SystemExit(f"error: {missing}") from None


def _embed(args: argparse.Namespace) -> int:
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
    from named_transformer.workflows.cli import require

    require("matplotlib")
    from named_transformer.workflows.runner import attention_figure

    pieces, weights = _encoder().attention(args.sentence)
    maps = [
        (f"layer {number}", layer, pieces, pieces)
        for number, layer in enumerate(weights, start=1)
    ]
    title = f"all-MiniLM-L6-v2: {args.sentence}"
    print(f"attention maps: {attention_figure(maps, Path(args.out), title=title)}")
    return 0


def add_commands(commands, formatter: type[argparse.HelpFormatter]) -> list:
    """Add ``embed`` and ``attention`` to the subcommands ``commands``."""
    embed = commands.add_parser(
        "embed", formatter_class=formatter,
        help="embed sentences with the packaged MiniLM; print their similarities",
    )  # fmt: skip
    embed.add_argument("sentences", nargs="+", help="the sentences to embed")
    embed.add_argument(
        "--json", action="store_true", help="print sentences and embeddings as JSON"
    )
    embed.set_defaults(run=_embed)
    attention = commands.add_parser(
        "attention", formatter_class=formatter,
        help="draw MiniLM's real attention maps of one sentence (layers × heads)",
    )  # fmt: skip
    attention.add_argument("sentence", help="the sentence to read")
    attention.add_argument("--out", default="attention.png", help="the PNG to write")
    attention.set_defaults(run=_attention)
    return [embed, attention]
