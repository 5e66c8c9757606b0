"""The command line's ``exercises`` command: write the skeletons, check them.

    python -m named_transformer exercises init my_attention
    python -m named_transformer exercises check my_attention softmax --hint

``init`` writes one file per page; ``check`` prints one line per exercise (``passed``,
``not started``, or ``failed:`` and the first thing that went wrong) and exits 0 only
when every requested exercise passed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from named_transformer.exercises.registry import EXERCISES, PAGES, exercise

__all__ = ["add_commands"]


def _init(args: argparse.Namespace) -> int:
    from named_transformer.exercises.learner import write_exercises

    files = write_exercises(args.directory, force=args.force)
    print(f"wrote {len(EXERCISES)} exercises in {len(files)} files under "
          f"{args.directory}:")  # fmt: skip
    for path in files:
        names = [e.name for e in EXERCISES.values() if e.file == path.name]
        print(f"  {path.name}: {', '.join(names)}")
    print(f"then: python -m named_transformer exercises check {args.directory} NAME")
    return 0


def _check(args: argparse.Namespace) -> int:
    from named_transformer.exercises.learner import check_directory

    for name in args.names:
        exercise(name)  # an unknown name: a ValueError, one line, exit 2
    folder = Path(args.directory)
    if not any((folder / file).is_file() for file, _ in PAGES.values()):
        # one line for the folder, not the same missing file once per exercise
        what = "is not a folder" if not folder.is_dir() else "holds no exercise files"
        init = f"python -m named_transformer exercises init {folder}"
        raise ValueError(f"{folder} {what}; write the exercises first: {init}")
    results = check_directory(args.directory, args.names)
    for result in results:
        hint = EXERCISES[result.name].hint if args.hint else None
        print(result.line(hint if result.status != "passed" else None))
    passed = sum(r.status == "passed" for r in results)
    print(f"{passed} of {len(results)} passed")
    return 0 if passed == len(results) else 1


def add_commands(commands, formatter: type[argparse.HelpFormatter]) -> list:
    """Add ``exercises`` (``init``, ``check``) to the subcommands ``commands``."""
    top = commands.add_parser(
        "exercises", formatter_class=formatter,
        help="write the functions yourself; the library's tests check them",
    )  # fmt: skip
    actions = top.add_subparsers(dest="action", required=True)
    init = actions.add_parser(
        "init", formatter_class=formatter,
        help="write a package of skeletons, one file per page",
    )  # fmt: skip
    init.add_argument("directory", help="where to write the exercises")
    init.add_argument("--force", action="store_true",
                      help="overwrite a directory that is not empty")  # fmt: skip
    init.set_defaults(run=_init, no_shape_checks=False)
    check = actions.add_parser(
        "check", formatter_class=formatter,
        help="check your functions with the library's own tests",
    )  # fmt: skip
    check.add_argument("directory", help="the directory init wrote")
    check.add_argument("names", nargs="*", metavar="NAME",
                       help=f"exercises to check (default: all): "
                       f"{', '.join(EXERCISES)}")  # fmt: skip
    check.add_argument("--hint", action="store_true",
                       help="name the page section to reread")  # fmt: skip
    check.set_defaults(run=_check, no_shape_checks=False)
    return []
