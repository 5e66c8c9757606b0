"""Timing helpers shared by the benchmarks: interleaved repeats, medians, spreads.

Timings on a shared 2-core machine are noisy, so every comparison runs its candidates
interleaved in one process (A, B, A, B, ...) after a warm-up, and reports the median of
the repeats with the spread (25th-75th percentile) and the ratio of the medians.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class Timing:
    name: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> str:
        """The interquartile range as a percentage of the median."""
        if len(self.seconds) < 4:
            return "n/a"
        q1, _, q3 = statistics.quantiles(self.seconds, n=4)
        return f"±{50 * (q3 - q1) / self.median:.0f}%"


def interleaved(
    candidates: dict[str, Callable[[], object]], repeats: int, warmup: int = 2
) -> list[Timing]:
    """Time each candidate ``repeats`` times, alternating between them."""
    for _ in range(warmup):
        for run in candidates.values():
            run()
    timings = {name: Timing(name, []) for name in candidates}
    for _ in range(repeats):
        for name, run in candidates.items():
            start = time.perf_counter()
            run()
            timings[name].seconds.append(time.perf_counter() - start)
    return list(timings.values())


def matmul_peak_gflops(size: int = 1024, repeats: int = 10) -> float:
    """This machine's float32 matrix-multiply rate, GFLOP/s (the median of
    ``repeats``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    (timing,) = interleaved({"matmul": lambda: torch.mm(a, b)}, repeats)
    return 2 * size**3 / timing.median / 1e9


def table(title: str, header: list[str], rows: list[list[object]]) -> str:
    """A Markdown table (the docs page pastes the printed output of a real run)."""
    lines = [
        f"\n### {title}\n",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"
