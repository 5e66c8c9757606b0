"""Run the default `train text` recipe as a newcomer would, then record what it did.

    python docs/scripts/text_experiment.py            # ~5 min on 2 cores
    python docs/scripts/text_experiment.py --quick    # seconds: a smoke test

Runs ``python -m named_transformer train text`` (the command's own defaults: shape
checks on, pydoc_data's help topics) in a subprocess and times it from start to exit,
then writes ``docs/figures/workflows/text-results.json`` (the wall time, steps,
validation bits per character, parameters, a sample continued from the checkpoint)
and ``docs/figures/workflows/text-loss.png`` (the library's line plot of the run's
history). The Workflows page "Train on real text" reads both.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402

from named_transformer.workflows.text import (  # noqa: E402
    generate_from_checkpoint,
    load_text_model,
    loss_figure,
)
from named_transformer.workflows.training import load_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The if statement"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=".cache/text-run", help="the run's folder")
    parser.add_argument("--out", default=str(ROOT / "docs" / "figures" / "workflows"))
    parser.add_argument("--quick", action="store_true", help="a few steps only")
    parser.add_argument(
        "--max-seconds",
        type=float,
        help="passed on (the recipe's cap is for an idle machine)",
    )
    args = parser.parse_args()
    command = [sys.executable, "-m", "named_transformer", "train", "text",
               "--out", args.runs, "--no-progress"]  # fmt: skip
    if args.max_seconds:
        command += ["--max-seconds", str(args.max_seconds)]
    if args.quick:
        command += ["--steps", "4", "--eval-every", "2", "--context", "16"]
    load = os.getloadavg()[0]  # other work on the machine slows the run
    started = time.perf_counter()
    printed = subprocess.run(command, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(printed.stdout, end="")
    checkpoint = Path(args.runs) / "checkpoint.pt"
    model, codec, settings = load_text_model(checkpoint)
    state = load_checkpoint(checkpoint)
    evaluations = [(r["step"], r["metrics"]["val_bpc"]) for r in state["history"]
                   if "val_bpc" in r["metrics"]]  # fmt: skip
    results = {
        "command": " ".join(["python", *command[1:3], *command[3:]]).replace(
            f" --out {args.runs} --no-progress", ""
        ),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(used.ru_utime + used.ru_stime, 1),
        "steps": state["step"],
        "bpc": evaluations[-1][1],
        "target": settings.target,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab": codec.vocab,
        "settings": state["meta"]["text"]["settings"],
        "evaluations": evaluations,
        "prompt": PROMPT,
        "sample": generate_from_checkpoint(checkpoint, PROMPT, 400, 0.8, seed=0),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
        "load_average_before": load,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "text-results.json").write_text(json.dumps(results, indent=1) + "\n")

    training = [(r["step"], r["loss"]) for r in state["history"]]
    title = f"{results['parameters']:,} parameters, {wall:.0f} s"
    loss_figure(training, evaluations, settings.target, out / "text-loss.png", title)
    print(f"wrote {out / 'text-results.json'} and {out / 'text-loss.png'}")


if __name__ == "__main__":
    main()
