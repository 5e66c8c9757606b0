"""Benchmarks 7, 11 and 17: greedy decoding with and without the key/value cache
(tokens/s); the cache of grouped-query attention and of a sliding window (bytes);
where the time of the eager cached step goes.

Four decoders run interleaved: the named cache (the default path the target counts),
recomputing the prefix, the named step compiled over a fixed-size cache (the explicit
option ``CompiledDecoder``), and a reference: the same cached decoding written with
PyTorch's primitives (``F.linear``, ``F.scaled_dot_product_attention``,
``F.layer_norm``) over the weights of the ``nn.TransformerEncoderLayer`` stack that
``interop.to_torch`` makes from the model. PyTorch has no cached decoder of its own;
the reference measures what the named cached step costs over a hand-written one.

Table 11 decodes with models that differ only in their self-attention's key/value heads
(8, 2, 1 of 8 query heads) and window, and reports the cache's bytes beside the speed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

import named_transformer as nt
from benchmarks.common import Timing, interleaved, table
from named_transformer.decoding import IncrementalDecoder, greedy
from named_transformer.decoding.compiled import CompiledDecoder
from named_transformer.interop.pytorch import to_torch
from named_transformer.models.config import TransformerConfig
from named_transformer.models.language_model import LanguageModel


class _PyTorchCachedStep:
    """Next-token log-probabilities of a post-norm, tied-output language model, cached,
    in plain PyTorch."""

    def __init__(self, model: LanguageModel, capacity: int) -> None:
        c = model.config
        if (
            c.norm_first
            or c.has_final_norm
            or c.activation != "relu"
            or model.generator.bias is not None
        ):
            raise ValueError(
                "the PyTorch reference covers post-norm, ReLU, tied-output models only"
            )
        self.layers = to_torch(model.blocks).layers
        self.heads, self.width = c.heads, c.layer
        self.table = model.embedding.table.detach()
        self.positions = model.positions(
            torch.zeros(1, capacity, c.layer)
        ).detach()  # the sinusoids alone
        head_width = c.layer // c.heads
        self.keys = [torch.empty(1, c.heads, capacity, head_width) for _ in self.layers]
        self.values = [
            torch.empty(1, c.heads, capacity, head_width) for _ in self.layers
        ]
        self.length = 0

    @torch.inference_mode()
    def __call__(self, tokens: Tensor) -> Tensor:
        t = self.length
        if tokens.shape != (1, t + 1):
            raise ValueError(
                "the PyTorch reference decodes one row from a one-token prompt"
            )
        x = (
            self.table[tokens[:, t:]] * math.sqrt(self.width)
            + self.positions[:, t : t + 1]
        )
        for layer, keys, values in zip(
            self.layers, self.keys, self.values, strict=True
        ):
            attention = layer.self_attn
            qkv = F.linear(x, attention.in_proj_weight, attention.in_proj_bias)
            q, k, v = qkv.view(1, 1, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            keys[:, :, t : t + 1], values[:, :, t : t + 1] = k, v
            y = F.scaled_dot_product_attention(
                q, keys[:, :, : t + 1], values[:, :, : t + 1]
            )
            y = F.linear(
                y.transpose(1, 2).reshape(1, 1, -1),
                attention.out_proj.weight,
                attention.out_proj.bias,
            )
            x = F.layer_norm(
                x + y,
                (self.width,),
                layer.norm1.weight,
                layer.norm1.bias,
                layer.norm1.eps,
            )
            y = F.linear(
                F.relu(F.linear(x, layer.linear1.weight, layer.linear1.bias)),
                layer.linear2.weight,
                layer.linear2.bias,
            )
            x = F.layer_norm(
                x + y,
                (self.width,),
                layer.norm2.weight,
                layer.norm2.bias,
                layer.norm2.eps,
            )
        self.length = t + 1
        return F.log_softmax(F.linear(x, self.table), dim=-1)[:, -1]


def _decoders(model, tokens: int, backend: str) -> dict[str, Callable[[], object]]:
    """Fresh decoders, by the row name of the table (``backend``: the compiled
    one's)."""
    return {
        "named, cache": lambda: IncrementalDecoder(model, cache=True),
        "named, recompute the prefix": lambda: IncrementalDecoder(model, cache=False),
        "named, compiled, fixed-size cache": lambda: CompiledDecoder(
            model, capacity=tokens, backend=backend
        ),
        "PyTorch primitives, cache": lambda: _PyTorchCachedStep(model, tokens),
    }


def _rows(
    model, prompt, tokens: int, repeats: int, threads: int, backend: str
) -> list[list[object]]:
    """Every decoder, interleaved (medians of ``repeats``), against recomputing the
    prefix.

    The first decoding of each is the warm-up (it compiles the compiled one) and gives
    the largest log-probability difference from recomputation.
    """
    decoders = _decoders(model, tokens, backend)
    log_probs = {
        name: greedy(make(), prompt, tokens).log_probs
        for name, make in decoders.items()
    }
    runs = {
        name: (lambda make=make: greedy(make(), prompt, tokens))
        for name, make in decoders.items()
    }
    timings = interleaved(runs, repeats, warmup=0)
    recompute = next(t for t in timings if t.name == "named, recompute the prefix")
    reference = log_probs[recompute.name]
    return [
        [
            threads,
            t.name,
            f"{tokens / t.median:.0f}",
            t.spread,
            f"{recompute.median / t.median:.1f}×",
            f"{(log_probs[t.name] - reference).abs().max().item():.0e}",
        ]
        for t in timings
    ]


def decoding_config(quick: bool) -> TransformerConfig:
    """The decoder-only model of tables 7 and 17 (and 24's cached step)."""
    return TransformerConfig(
        decoder_layers=2 if quick else 4,
        layer=64 if quick else 256,
        heads=4 if quick else 8,
        hidden=128 if quick else 1024,
        dropout=0.0,
    )


def kv_cache(quick: bool) -> str:
    """Greedy decoding of ``tokens`` new tokens from a 1-token prompt, checks off.

    Reported with one intra-op thread and with all cores: a cached step is a chain of
    tiny operations, which a second thread speeds up far less than the large products
    of recomputation. Quick: the compiled decoder on the ``eager`` backend (the capture
    alone, no C++ compiler), as table 6.
    """
    tokens, repeats = (16, 1) if quick else (256, 7)
    backend = "eager" if quick else "inductor"
    config = decoding_config(quick)
    model = LanguageModel(100, config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    rows, threads_before = [], torch.get_num_threads()
    with nt.shape_checks(False), torch.no_grad():
        for threads in sorted({1, threads_before}):
            torch.set_num_threads(threads)
            rows += _rows(model, prompt, tokens, repeats, threads, backend)
    torch.set_num_threads(threads_before)
    sizes = (
        f"{config.decoder_layers} layers, layer {config.layer}, heads {config.heads}, "
        f"hidden {config.hidden}"
    )
    header = [
        "threads",
        "decoding",
        "tokens/s",
        "spread",
        "speed-up over recomputing",
        "max abs Δ log p",
    ]
    compiled = "; compiled: the eager backend, quick" if quick else ""
    return table(
        f"7. Greedy decoding of {tokens} tokens, batch 1 ({sizes}{compiled})",
        header,
        rows,
    )


def _grouped_row(model, prompt, tokens: int, label: str, timing, reference) -> list:
    """One row of table 11: the cache's bytes and the cached decoding's speed."""
    decoder = IncrementalDecoder(model)
    cached = greedy(decoder, prompt, tokens)
    recomputed = greedy(IncrementalDecoder(model, cache=False), prompt, tokens)
    window = decoder.window
    held = decoder.length if window is None else min(decoder.length, window - 1)
    per_token = decoder.cache_bytes() / held
    return [
        label,
        model.config.kv_heads or model.config.heads,
        f"{per_token:.0f}",
        f"{decoder.cache_bytes() / 1024:.0f}",
        f"{decoder.cache_bytes(allocated=True) / 1024:.0f}",
        f"{tokens / timing.median:.0f}",
        timing.spread,
        f"{reference.median / timing.median:.2f}×",
        f"{(cached.log_probs - recomputed.log_probs).abs().max().item():.0e}",
    ]


def grouped_cache(quick: bool) -> str:
    """11. The key/value cache of grouped-query attention and of a sliding window.

    Greedy decoding of ``tokens`` tokens from a 1-token prompt, batch 1, checks off,
    with heads = 8 and kv_heads 8 (multi-head), 2 (grouped-query) and 1 (multi-query),
    the same sizes otherwise; then kv_heads 8 and 2 under a sliding window shorter than
    the generation. Bytes per token: of the positions cached (the keys and values of
    every layer); the cache columns are after the last step: held (positions still
    attended) and allocated (the buffers, spare room included).
    """
    tokens, repeats, window = (24, 1, 8) if quick else (256, 5, 32)
    sizes = dict(
        decoder_layers=2 if quick else 4,
        layer=32 if quick else 256,
        heads=8,
        hidden=64 if quick else 1024,
        dropout=0.0,
    )
    variants = {
        "multi-head": {"kv_heads": 8},
        "grouped-query": {"kv_heads": 2},
        "multi-query": {"kv_heads": 1},
        f"multi-head, window {window}": {"kv_heads": 8, "window": window},
        f"grouped-query, window {window}": {"kv_heads": 2, "window": window},
    }
    models = {}
    for label, options in variants.items():
        torch.manual_seed(0)
        models[label] = LanguageModel(100, TransformerConfig(**sizes, **options)).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    with nt.shape_checks(False), torch.no_grad():
        runs = {
            label: (lambda m=model: greedy(IncrementalDecoder(m), prompt, tokens))
            for label, model in models.items()
        }
        timings = {t.name: t for t in interleaved(runs, repeats, warmup=1)}
        reference = timings["multi-head"]
        rows = [
            _grouped_row(model, prompt, tokens, label, timings[label], reference)
            for label, model in models.items()
        ]
    header = [
        "self-attention",
        "kv_heads",
        "cache bytes / token",
        "held (KiB)",
        "allocated (KiB)",
        "tokens/s",
        "spread",
        "speed vs multi-head",
        "max abs Δ log p vs recomputing",
    ]
    description = (
        f"{sizes['decoder_layers']} layers, layer {sizes['layer']}, heads 8, "
        f"hidden {sizes['hidden']}, float32"
    )
    return table(
        f"11. Grouped-query attention and a sliding window: the key/value cache over "
        f"{tokens} tokens, batch 1 ({description})",
        header,
        rows,
    )


class _Timers:
    """Seconds spent in named parts of the named cached step, by wrapping them for the
    length of a ``with`` block."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: object, attribute: str, part: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                self.seconds[part] = self.seconds.get(part, 0.0) + elapsed

        if attribute in vars(owner):  # a module's function, a class's method
            self._undo.append(lambda: setattr(owner, attribute, original))
        else:  # an instance's forward, which its class defines
            self._undo.append(lambda: delattr(owner, attribute))
        setattr(owner, attribute, timed)

    def __enter__(self) -> _Timers:
        return self

    def __exit__(self, *exc) -> None:
        for undo in reversed(self._undo):
            undo()


_PARTS = [
    "stacked projection (W_qkv)",
    "cache write",
    "attention over the cache, W^O",
    "feed-forward",
    "norms",
    "logits, log-softmax",
]
_REST = "the rest: embedding, positions, residual sums, Python"


class _ThroughModules(IncrementalDecoder):
    """The cached step before its plan: every residual sublayer, norm and feed-forward
    called through its module (what the decoder still runs while a recording is
    open)."""

    def __init__(self, model) -> None:
        super().__init__(model)
        self.plans = [None] * len(self.layers)


_STEPS = {
    "through the modules (before)": _ThroughModules,
    "plan (now)": IncrementalDecoder,
}


def _timed_decoding(model, prompt, tokens: int, decoder) -> dict[str, float]:
    """One greedy decoding with the named cache, its time split into parts (each
    part's function wrapped by a timer, which adds its own small cost)."""
    from named_transformer.decoding import incremental

    with _Timers() as timers:
        timers.wrap(incremental, "stacked_projection", _PARTS[0])
        timers.wrap(IncrementalDecoder, "_remember", _PARTS[1])
        timers.wrap(incremental, "_cached_attention", _PARTS[2])
        timers.wrap(incremental._FeedForward, "__call__", _PARTS[3])
        timers.wrap(incremental._Norm, "__call__", _PARTS[4])
        for layer in model.blocks.layers:
            timers.wrap(layer.feed_forward, "forward", _PARTS[3])
            for residual in (layer.attention_residual, layer.feed_forward_residual):
                timers.wrap(residual.norm, "forward", _PARTS[4])
        timers.wrap(model.generator, "forward", _PARTS[5])
        start = time.perf_counter()
        greedy(decoder(model), prompt, tokens)
        total = time.perf_counter() - start
    parts = {part: timers.seconds.get(part, 0.0) for part in _PARTS}
    parts[_REST] = total - sum(parts.values())
    parts["total, parts timed"] = total
    return parts


def step_breakdown(quick: bool) -> str:
    """17. Where the eager cached step's time goes: table 7's model and decoding, the
    named cache's time per token split into its parts, through the modules (as
    before the plan) and with the plan (the default), beside the PyTorch-primitives
    step.

    The parts come from decodings with a timer around each part (the median of
    ``repeats`` by total time); the untimed totals and the ratios from decodings
    without timers (medians of ``repeats``), all of them interleaved."""
    tokens, repeats = (16, 1) if quick else (256, 7)
    config = decoding_config(quick)
    torch.manual_seed(0)
    model = LanguageModel(100, config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    threads_before = torch.get_num_threads()
    columns: dict[str, dict[str, str]] = {}
    with nt.shape_checks(False), torch.no_grad():
        for threads in sorted({1, threads_before}):
            torch.set_num_threads(threads)
            runs = {
                name: (lambda make=make: greedy(make(model), prompt, tokens))
                for name, make in _STEPS.items()
            }
            runs["primitives"] = lambda: greedy(
                _PyTorchCachedStep(model, tokens), prompt, tokens
            )
            for run in runs.values():  # warm-up
                run()
            timed = {name: [] for name in _STEPS}
            untimed = {name: [] for name in runs}
            for _ in range(repeats):  # all interleaved: timed parts, then untimed
                for name, make in _STEPS.items():
                    timed[name].append(_timed_decoding(model, prompt, tokens, make))
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    untimed[name].append(time.perf_counter() - start)
            totals = {name: Timing(name, seconds) for name, seconds in untimed.items()}
            reference = totals["primitives"].median
            for name in _STEPS:
                ordered = sorted(
                    timed[name], key=lambda parts: parts["total, parts timed"]
                )
                parts = ordered[len(ordered) // 2]
                column = {k: f"{v / tokens * 1e6:.0f}" for k, v in parts.items()}
                column["total, untimed"] = f"{totals[name].median / tokens * 1e6:.0f}"
                column["PyTorch primitives: total"] = f"{reference / tokens * 1e6:.0f}"
                column["named / primitives"] = f"{totals[name].median / reference:.2f}"
                label = f"{threads} thread{'s' * (threads > 1)}"
                columns[f"{label}, {name}"] = column
    torch.set_num_threads(threads_before)
    keys = [*_PARTS, _REST, "total, parts timed", "total, untimed",
            "PyTorch primitives: total", "named / primitives"]  # fmt: skip
    rows = [[key] + [column[key] for column in columns.values()] for key in keys]
    header = ["µs per token", *columns]
    return table(
        f"17. Where the eager cached step's time goes: greedy decoding of {tokens} "
        f"tokens, batch 1 ({config.decoder_layers} layers, layer {config.layer}, "
        f"heads {config.heads}, hidden {config.hidden}), checks off",
        header,
        rows,
    )
