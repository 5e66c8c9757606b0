"""The command line's ``rasp`` command: run an example program two ways.

    python -m named_transformer rasp sort "dbca" --out maps.png

prints the interpreter's output and the compiled model's, with the model's size, and
draws the compiled model's attention maps (one panel per head) into ``--out``.
"""

from __future__ import annotations

import argparse

from named_transformer.rasp.interpreter import evaluate
from named_transformer.rasp.programs import PROGRAMS

__all__ = ["add_commands"]


def _tokens(text: str) -> list[str]:
    """``"a b c"`` (spaces: one token per word) or ``"abc"`` (one per character)."""
    return text.split() if " " in text.strip() else list(text.strip())


def _rasp(args: argparse.Namespace) -> int:
    if args.program not in PROGRAMS:
        raise ValueError(
            f"unknown RASP program {args.program!r}; one of {', '.join(PROGRAMS)}"
        )
    example = PROGRAMS[args.program]
    inputs = _tokens(args.input)
    if not inputs:
        raise ValueError("the input is empty: give at least one token")
    unknown = [t for t in inputs if t not in example.vocabulary]
    if unknown:
        known = " ".join(example.vocabulary)
        raise ValueError(
            f"token {unknown[0]!r} is not in the vocabulary of "
            f"'{args.program}': {known}"
        )
    if len(inputs) > example.max_length:
        raise ValueError(f"{len(inputs)} tokens, but '{args.program}' is compiled for "
                         f"at most {example.max_length}")  # fmt: skip
    # torch, only now: the parser reads add_commands without it
    from named_transformer.rasp.compiler import compile_program

    model = compile_program(example.program, example.vocabulary, example.max_length)
    print(f"{args.program}: {example.about}")
    print(f"input:       {inputs}")
    print(f"interpreter: {evaluate(example.program, inputs)}")
    print(f"compiled:    {model.run(inputs)}")
    print(f"model:       {model.summary()}")
    if args.out:
        from named_transformer.rasp.figures import draw_attention

        draw_attention(model, inputs, args.out)
        print(f"attention maps: {args.out}")
    return 0


def add_commands(commands, formatter: type[argparse.HelpFormatter]) -> list:
    """Add ``rasp`` to the subcommands ``commands``."""
    rasp = commands.add_parser(
        "rasp", formatter_class=formatter,
        help="run a RASP program with the interpreter and as a compiled Transformer",
    )  # fmt: skip
    rasp.add_argument("program", help=f"one of: {', '.join(PROGRAMS)}")
    rasp.add_argument("input", help='the tokens: "abca" or "a b c a"')
    rasp.add_argument(
        "--out", default="rasp-attention.png",
        help="where to draw the attention maps ('' for none)",
    )  # fmt: skip
    rasp.set_defaults(run=_rasp)
    return [rasp]
