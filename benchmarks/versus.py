"""Old against new: the same benchmark cells run against two checkouts of the package,
interleaved in fresh processes.

    python -m benchmarks.versus --old /path/to/old/checkout [--new PATH] [--rounds N]
        [--cells mha,train,...]

Each round runs one fresh interpreter per checkout (old then new, new then old in the
next round, so that drift on the machine hits both alike). The interpreter imports
``named_transformer`` from that checkout (a temporary folder on ``PYTHONPATH`` holds
only a link to the checkout's package) and this file's cells from here: the cell code
is one file, run against both. A cell times the named code and its PyTorch (or
``transformers``) reference interleaved in that process and reports the ratio of their
medians, named / reference. The table gives, per cell, the median over the rounds of
the old ratio and of the new one, and new / old: the median over the rounds of each
round's new ratio over its old one, with the lowest and highest.

The cells use only what both 0.8.3 and 0.9.0 offer (``from_torch``, ``nt.attention``,
``blockwise_attention``, ``LanguageModel(vocab, TransformerConfig(...))`` with its
default positions, ``IncrementalDecoder``, ``greedy``, ``load_smollm2``). float32,
shape checks off, torch's default thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELLS = ("mha", "train", "cached", "attention", "blockwise", "compiled", "smollm2")
DESCRIPTIONS = {
    "mha": "MultiHeadAttention fwd+bwd / nn.MultiheadAttention (batch 32, seq 64, "
    "layer 256, heads 8, causal)",
    "train": "training step / nn.Transformer (AdamW; layer 256, heads 8, 2+2 layers, "
    "hidden 1024, batch 16 × seq 64, dropout 0.1)",
    "cached": "cached greedy decoding / PyTorch primitives (128 tokens, 4 layers, "
    "layer 256, heads 8, hidden 1024)",
    "attention-mask-256": "nt.attention / SDPA, boolean causal mask, seq 256 "
    "(batch 2, heads 8, key 64, forward)",
    "attention-mask-1536": "nt.attention / SDPA, boolean causal mask, seq 1536",
    "attention-nomask-256": "nt.attention / SDPA, no mask, seq 256",
    "attention-nomask-1024": "nt.attention / SDPA, no mask, seq 1024",
    "blockwise": "blockwise_attention(causal=True) / SDPA(is_causal=True), seq 2048, "
    "forward",
    "compiled": "torch.compile'd training step / nn.Transformer eager (1+1 layers, "
    "layer 256, hidden 1024, batch 16 × seq 64, dropout 0.0)",
    "smollm2": "SmolLM2-135M per decoded token, eager IncrementalDecoder / "
    "transformers generate (32-token prompt, 16 new)",
}


# ---------------------------------------------------------------------------------
# The cells: run in the child, against whichever package the child imports.


def _ratio(candidates: dict, repeats: int, warmup: int = 2) -> dict:
    from benchmarks.common import interleaved

    named, reference = interleaved(candidates, repeats, warmup)
    return {
        "ratio": named.median / reference.median,
        "named_ms": named.median * 1e3,
        "reference_ms": reference.median * 1e3,
    }


def _mha() -> dict:
    import torch
    from torch import nn

    import named_transformer as nt
    from named_transformer.interop.pytorch import from_torch

    batch, seq, layer, heads = 32, 64, 256, 8
    theirs = nn.MultiheadAttention(layer, heads, batch_first=True)
    ours = from_torch(theirs)
    x = torch.randn(batch, seq, layer, requires_grad=True)
    causal = nt.causal_mask(seq)
    return _ratio(
        {
            "named": lambda: ours(x, mask=causal).sum().backward(),
            "torch": lambda: (
                theirs(x, x, x, attn_mask=~causal, need_weights=False)[0]
                .sum()
                .backward()
            ),
        },
        15,
    )


def _transformer_steps(layers: int, batch: int, dropout: float):
    import torch
    from torch import nn

    import named_transformer as nt
    from named_transformer.interop.pytorch import from_torch

    layer, heads, hidden, seq = 256, 8, 1024, 64
    theirs = nn.Transformer(
        layer, heads, layers, layers, hidden, dropout, batch_first=True
    )
    ours = from_torch(theirs)
    source, target = torch.randn(batch, seq, layer), torch.randn(batch, seq, layer)
    causal = nt.causal_mask(seq)

    def step(model, optimiser, call):
        def run():
            optimiser.zero_grad()
            call(model).square().mean().backward()
            optimiser.step()

        return run

    def named_call(model):
        return model(source, target, target_mask=causal)

    def torch_call(model):
        return model(source, target, tgt_mask=~causal, tgt_is_causal=True)

    def adamw(model):
        return torch.optim.AdamW(model.parameters(), lr=1e-4)

    return ours, step, named_call, torch_call, adamw, theirs


def _train() -> dict:
    ours, step, named_call, torch_call, adamw, theirs = _transformer_steps(2, 16, 0.1)
    return _ratio(
        {
            "named": step(ours, adamw(ours), named_call),
            "torch": step(theirs, adamw(theirs), torch_call),
        },
        10,
    )


def _compiled() -> dict:
    import torch

    ours, step, named_call, torch_call, adamw, theirs = _transformer_steps(1, 16, 0.0)
    torch._dynamo.reset()
    compiled = torch.compile(ours, fullgraph=True)
    named = step(compiled, adamw(ours), named_call)
    start = time.perf_counter()
    named()  # compiled here, outside the timing
    seconds = time.perf_counter() - start
    reference = step(theirs, adamw(theirs), torch_call)
    return {**_ratio({"named": named, "torch": reference}, 10), "compile_s": seconds}


def _cached() -> dict:
    import torch

    import named_transformer as nt
    from benchmarks.decoding import _PyTorchCachedStep
    from named_transformer.models.config import TransformerConfig
    from named_transformer.models.language_model import LanguageModel

    tokens = 128
    config = TransformerConfig(
        decoder_layers=4, layer=256, heads=8, hidden=1024, dropout=0.0
    )
    model = LanguageModel(100, config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    with torch.no_grad():
        return _ratio(
            {
                "named": lambda: nt.greedy(
                    nt.IncrementalDecoder(model), prompt, tokens
                ),
                "torch": lambda: nt.greedy(
                    _PyTorchCachedStep(model, tokens), prompt, tokens
                ),
            },
            7,
            warmup=1,
        )


def _attention(seq: int, masked: bool) -> dict:
    import torch
    import torch.nn.functional as F

    import named_transformer as nt

    q, k, v = (torch.randn(2, 8, seq, 64) for _ in range(3))
    mask = nt.causal_mask(seq) if masked else None
    with torch.no_grad():
        return _ratio(
            {
                "named": lambda: nt.attention(q, k, v, mask),
                "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            },
            max(7, 20 * 256 // seq),
        )


def _blockwise() -> dict:
    import torch
    import torch.nn.functional as F

    from named_transformer.core.blockwise import blockwise_attention

    q, k, v = (torch.randn(2, 8, 2048, 64) for _ in range(3))
    with torch.no_grad():
        return _ratio(
            {
                "named": lambda: blockwise_attention(q, k, v, causal=True),
                "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            },
            7,
        )


def _smollm2() -> dict:
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging

    import named_transformer as nt
    from named_transformer.pretrained.smollm2 import smollm2_path

    path = smollm2_path()
    logging.disable_progress_bar()
    theirs = LlamaForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    named = nt.load_smollm2().model
    prompt_length, new = 32, 16
    generator = torch.Generator().manual_seed(0)
    vocab = named.generator.table.shape[0]
    prompt = torch.randint(1, vocab, (1, prompt_length), generator=generator)

    def ours(steps: int):
        return nt.greedy(nt.IncrementalDecoder(named), prompt, steps).tokens

    def reference(steps: int):
        return theirs.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=steps,
            min_new_tokens=steps, do_sample=False, pad_token_id=0,
        )[:, prompt_length:]  # fmt: skip

    with torch.inference_mode():
        if ours(new).tolist() != reference(new).tolist():
            raise AssertionError("smollm2: greedy tokens differ")
        first = _ratio({"named": lambda: ours(1), "hf": lambda: reference(1)}, 4, 1)
        whole = _ratio({"named": lambda: ours(new), "hf": lambda: reference(new)}, 4, 1)
    named_token = (whole["named_ms"] - first["named_ms"]) / (new - 1)
    their_token = (whole["reference_ms"] - first["reference_ms"]) / (new - 1)
    return {
        "ratio": named_token / their_token,
        "named_ms": named_token,
        "reference_ms": their_token,
    }


def _cell_runs() -> dict:
    return {
        "mha": [("mha", _mha)],
        "train": [("train", _train)],
        "cached": [("cached", _cached)],
        "attention": [
            (
                f"attention-{'mask' if masked else 'nomask'}-{seq}",
                lambda seq=seq, masked=masked: _attention(seq, masked),
            )
            for masked, seq in ((True, 256), (True, 1536), (False, 256), (False, 1024))
        ],  # fmt: skip
        "blockwise": [("blockwise", _blockwise)],
        "compiled": [("compiled", _compiled)],
        "smollm2": [("smollm2", _smollm2)],
    }


def child(cells: list[str], threads: int | None) -> None:
    """Run ``cells`` against the package this interpreter imports; print one JSON."""
    import torch

    import named_transformer as nt

    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    results = {"package": str(Path(nt.__file__).resolve().parent),
               "threads": torch.get_num_threads()}  # fmt: skip
    runs = _cell_runs()
    with nt.shape_checks(False):
        for cell in cells:
            for name, run in runs[cell]:
                results[name] = run()
    print(json.dumps(results))


# ---------------------------------------------------------------------------------
# The parent: rounds of fresh interpreters, alternating the checkouts.


def _run(checkout: Path, cells: list[str], links: Path, threads: int | None) -> dict:
    # the checkout's link first; what PYTHONPATH held (installed wheels) after
    paths = [str(links), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)),
           "TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.versus", "--child", ",".join(cells),
         *([] if threads is None else ["--threads", str(threads)])],
        env=env, cwd=links, capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"{checkout}: the cells failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    expected = (checkout / "named_transformer").resolve()
    if Path(result["package"]) != expected:
        raise RuntimeError(f"imported {result['package']}, not {expected}")
    return result


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f}–{max(values):.3f}"


def report(old: list[dict], new: list[dict], names: list[str]) -> str:
    lines = [
        "| cell | old ratio | spread | new ratio | spread | new / old | "
        "lowest–highest |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        olds = [r[name]["ratio"] for r in old]
        news = [r[name]["ratio"] for r in new]
        pairs = [n / o for n, o in zip(news, olds, strict=True)]
        lines.append(
            f"| {DESCRIPTIONS[name]} | {statistics.median(olds):.3f} | "
            f"{_spread(olds)} | {statistics.median(news):.3f} | {_spread(news)} | "
            f"{statistics.median(pairs):.3f} | {_spread(pairs)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="the old checkout (repository root)")
    parser.add_argument("--new", type=Path, default=HERE.parent,
                        help="the new checkout (default: this one)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cells", default=",".join(CELLS),
                        help=f"comma-separated, of {', '.join(CELLS)}")  # fmt: skip
    parser.add_argument(
        "--threads", type=int, help="torch's intra-op threads (default: torch's)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child.split(","), args.threads)
        return
    if args.old is None:
        parser.error("--old is required")
    cells = args.cells.split(",")
    unknown = sorted(set(cells) - set(CELLS))
    if unknown:
        parser.error(f"unknown cells {unknown}; choose among {', '.join(CELLS)}")
    started = time.perf_counter()
    results: dict[str, list[dict]] = {"old": [], "new": []}
    print(f"load before: {_load()}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as old_links, \
            tempfile.TemporaryDirectory() as new_links:  # fmt: skip
        links = {"old": Path(old_links), "new": Path(new_links)}
        checkouts = {"old": args.old.resolve(), "new": args.new.resolve()}
        for which, folder in links.items():
            (folder / "named_transformer").symlink_to(
                checkouts[which] / "named_transformer"
            )
        for round_ in range(args.rounds):
            order = ["old", "new"] if round_ % 2 == 0 else ["new", "old"]
            for which in order:
                results[which].append(
                    _run(checkouts[which], cells, links[which], args.threads)
                )
            print(f"round {round_ + 1}/{args.rounds} done, "
                  f"{time.perf_counter() - started:.0f} s, load {_load()}",
                  file=sys.stderr)  # fmt: skip
    names = [name for name in DESCRIPTIONS if name in results["new"][0]]
    print(
        f"Old: {checkouts['old']}; new: {checkouts['new']}; {args.rounds} rounds; "
        f"{results['new'][0]['threads']} threads; load (1/5/15 min) after: {_load()}; "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    print(report(results["old"], results["new"], names))


if __name__ == "__main__":
    main()
