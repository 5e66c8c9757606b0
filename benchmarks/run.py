"""Run every benchmark and print its tables: ``python -m benchmarks.run [--quick]``.

float32 on the CPU with all cores; shape checks off unless a table says otherwise. Each
table compares candidates interleaved in one process (medians of repeats, with the
interquartile spread). ``--quick`` runs tiny sizes and few repeats: CI uses it so the
suite cannot rot; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

import named_transformer as nt
from benchmarks import (
    attention_core,
    busy,
    checks,
    decoding,
    inside,
    modules,
    pretrained,
    smollm2,
)
from benchmarks.common import matmul_peak_gflops


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, few repeats (CI)"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    torch.manual_seed(0)
    peak = matmul_peak_gflops(256 if args.quick else 1024, 3 if args.quick else 20)
    if args.quick:
        print("Quick mode: tiny sizes, few repeats; the numbers mean nothing.\n")
    print(f"Machine: {machine()}; float32 matmul peak {peak:.0f} GFLOP/s")
    with nt.shape_checks(False):
        print(attention_core.attention_vs_sdpa(args.quick))
        print(attention_core.score_zoo(args.quick))
    print(modules.multihead(args.quick))
    print(modules.training_step(args.quick, peak))
    print(modules.compiled(args.quick))
    print(decoding.kv_cache(args.quick))
    print(attention_core.peak_memory(args.quick))
    print(modules.fused_option(args.quick))
    print(pretrained.minilm(args.quick))
    print(decoding.grouped_cache(args.quick))
    with nt.shape_checks(False):
        print(attention_core.blockwise_vs_sdpa(args.quick))
    print(attention_core.blockwise_memory(args.quick))
    print(inside.taps(args.quick))
    with nt.shape_checks(False):
        print(attention_core.crossover(args.quick))
        print(attention_core.block_sizes(args.quick))
        print(attention_core.default_vs_pytorch(args.quick))
        print(attention_core.biased_vs_pytorch(args.quick))
        print(attention_core.unmasked_vs_pytorch(args.quick))
    print(decoding.step_breakdown(args.quick))
    print(smollm2.smollm2(args.quick))
    print(checks.check_cost(args.quick))
    print(busy.contention(args.quick))
    print(busy.tiny_recipe(args.quick))
    print(f"\n(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
