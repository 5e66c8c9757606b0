"""Draw the docs figures from real runs of the library, with named_transformer.plot.

    python docs/scripts/make_figures.py                 # rewrite docs/figures/*.png
    python docs/scripts/make_figures.py --quick --out /tmp/figs   # fast smoke run (CI)

Every figure is computed by the library's own functions (softmax, attention_weights,
masks, positions) and drawn by ``named_transformer.plot``. The example numbers are the
ones the pages compute in their executed examples. ``--quick`` uses fewer samples, a
low resolution and no layout pass (constrained layout) so a test can run the whole
script in a few seconds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from einops import einsum, repeat  # noqa: E402

import named_transformer as nt  # noqa: E402
from named_transformer import plot  # noqa: E402

FIGURES = Path(__file__).resolve().parents[1] / "figures"

# The cars of the scoring-functions tutorial, as on the "Attention as a soft dictionary"
# page.
CARS = ["hatchback", "minivan", "sports car", "SUV", "pickup"]
CAR_FEATURES = torch.tensor(
    [  # safety, capacity, acceleration, mpg: the keys
        [8.0, 3.0, 4.0, 9.0],
        [9.0, 10.0, 2.0, 5.0],
        [5.0, 1.0, 10.0, 3.0],
        [7.0, 8.0, 5.0, 4.0],
        [4.0, 6.0, 3.0, 2.0],
    ]
)
NEW_CAR = torch.tensor([[8.0, 4.0, 5.0, 8.0]])  # the query: one row of seq_q

TOKENS = ["<s>", "the", "cat", "sat", "on", "mats"]


def soft_to_hard(quick: bool) -> plt.Figure:
    """Attention weights of the new car over the five cars as the inverse temperature
    grows."""
    scores = nt.scaled_dot_score(NEW_CAR, CAR_FEATURES)[0]  # seq
    betas = torch.logspace(-2.5, 0.5, 12 if quick else 200)
    weights = nt.softmax(
        einsum(betas, scores, "beta, seq -> beta seq")
    )  # one row per β
    ax = plot.line_plot(
        betas,
        {car: weights[:, i] for i, car in enumerate(CARS)},
        logx=True,
        xlabel="inverse temperature β",
        ylabel="attention weight",
        title="softmax_seq(β · score): from uniform to one-hot",
    )
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    return ax.figure


def dot_variance(quick: bool) -> plt.Figure:
    """Variance of q ⊙_key k (standard normal q, k) against |key|, with and without
    1/√|key|."""
    generator = torch.Generator().manual_seed(0)
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    samples = 200 if quick else 20_000
    plain, scaled = [], []
    for size in sizes:
        queries = torch.randn(
            samples, 1, size, generator=generator, dtype=torch.float64
        )
        keys = torch.randn(samples, 1, size, generator=generator, dtype=torch.float64)
        plain.append(nt.dot_score(queries, keys).var().item())
        scaled.append(nt.scaled_dot_score(queries, keys).var().item())
    ax = plot.line_plot(
        sizes,
        {
            "|key| (theory)": sizes,
            "Q ⊙_key K": plain,
            "Q ⊙_key K / √|key|": scaled,
        },
        styles={"|key| (theory)": {"linestyle": "--", "color": "grey", "marker": None}},
        logx=True,
        logy=True,
        markers=True,
        xlabel="|key|",
        ylabel="variance of the score",
        title="Dot products grow with |key|; scaling keeps variance 1",
    )
    return ax.figure


def shared_colorbar(fig: plt.Figure, axes, label: str = "attention weight") -> None:
    """One colour bar for panels drawn on the same scale (their first image's)."""
    axes = list(axes)
    fig.colorbar(axes[0].images[0], ax=axes, shrink=0.85, label=label)


def mask_colorbar(fig: plt.Figure, ax) -> None:
    """A two-step colour bar for a boolean mask drawn in grey: False (black) below,
    True (white) above."""
    bar = fig.colorbar(ax.images[0], ax=ax, shrink=0.85, ticks=[0.0, 1.0])
    bar.ax.set_yticklabels(["False", "True"])


def masks(quick: bool) -> plt.Figure:
    """The causal mask and the attention weights it produces."""
    generator = torch.Generator().manual_seed(1)
    seq, key = len(TOKENS), 4
    queries = torch.randn(seq, key, generator=generator)
    keys = torch.randn(seq, key, generator=generator)
    mask = nt.causal_mask(seq)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
    plot.attention_heatmap(
        mask.float(),
        TOKENS,
        TOKENS,
        ax=left,
        colorbar=False,
        annotate=False,
        title="causal_mask(6): True (white) = may attend",
        cmap="Greys_r",
    )
    mask_colorbar(fig, left)
    plot.attention_heatmap(
        nt.attention_weights(queries, keys, mask),
        TOKENS,
        TOKENS,
        ax=right,
        title="attention_weights(Q, K, mask)",
    )
    return fig


def padding(quick: bool) -> plt.Figure:
    """Key padding for a batch of two sentences of lengths 6 and 4, padded to 6."""
    generator = torch.Generator().manual_seed(2)
    lengths = torch.tensor([6, 4])
    batch, seq, key = 2, len(TOKENS), 4
    queries = torch.randn(batch, seq, key, generator=generator)
    keys = torch.randn(batch, seq, key, generator=generator)
    mask = nt.key_padding_mask(lengths, seq)  # batch 1 seq
    weights = nt.attention_weights(queries, keys, mask)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
    short = TOKENS[:4] + ["<pad>", "<pad>"]
    rows = repeat(
        mask[1, 0].float(), "seq -> seq_q seq", seq_q=seq
    )  # one row per query
    plot.attention_heatmap(
        rows,
        short,
        short,
        ax=left,
        title="key_padding_mask: sentence 2 (length 4)",
        colorbar=False,
        annotate=False,
        cmap="Greys_r",
    )
    mask_colorbar(fig, left)
    plot.attention_heatmap(
        weights[1], short, short, ax=right, title="attention_weights: padded keys get 0"
    )
    return fig


def basic_equivariance(quick: bool) -> plt.Figure:
    """Weights of basic self-attention for x and for x with its last two positions
    swapped."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(4, 2, generator=generator)
    permutation = torch.tensor([0, 1, 3, 2])
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.5), layout="constrained")
    for ax, x, labels, title in (
        (axes[0], inputs, ["x0", "x1", "x2", "x3"], "softmax_seq(X ⊙_layer X)"),
        (
            axes[1],
            inputs[permutation],
            ["x0", "x1", "x3", "x2"],
            "same, positions 2 and 3 swapped",
        ),
    ):
        weights = nt.softmax(nt.dot_score(x, x))
        plot.attention_heatmap(
            weights, labels, labels, ax=ax, title=title, colorbar=False
        )
    shared_colorbar(fig, axes)
    return fig


def positions(quick: bool) -> plt.Figure:
    """The sinusoidal table P over seq × layer."""
    table = nt.sinusoidal_positions(32 if quick else 64, 64)
    ax = plot.table_heatmap(table, title="sinusoidal_positions(64, 64)")
    return ax.figure


def relative_positions(quick: bool) -> plt.Figure:
    """The clipped relative-distance index (k = 2): a full pass, then two queries after
    a cache."""
    k = 2
    fig, axes = plt.subplots(
        1,
        2,
        figsize=(9, 3.6),
        layout="constrained",
        gridspec_kw={"width_ratios": [6, 6]},
    )
    for ax, index, queries, title in (
        (
            axes[0],
            nt.relative_position_index(6, 6, k),
            TOKENS,
            "relative_position_index(6, 6, k=2)",
        ),
        (
            axes[1],
            nt.relative_position_index(2, 6, k, offset=4),
            TOKENS[4:],
            "2 new queries after a cache of 4 (offset=4)",
        ),
    ):
        plot.attention_heatmap(
            index.float(),
            queries,
            TOKENS,
            ax=ax,
            vmin=0,
            vmax=2 * k,
            cmap="viridis",
            colorbar=False,
            fmt=".0f",
            title=title,
        )
    fig.colorbar(
        axes[0].images[0],
        ax=list(axes),
        shrink=0.85,
        ticks=range(2 * k + 1),
        label="index clip(i − j, k) + k (key i, query j)",
    )
    return fig


def multihead_weights(quick: bool) -> plt.Figure:
    """Per-head causal self-attention weights of a (random) MultiHeadAttention over six
    tokens, two heads a row."""
    torch.manual_seed(0)
    layer, heads = 16, 4
    attention = nt.MultiHeadAttention(layer, heads).eval()
    embedded = nt.SinusoidalPositions(layer, dropout=0.0)(
        torch.randn(len(TOKENS), layer)
    )
    with nt.record(attention, "weights") as found:
        attention(embedded, mask=nt.causal_mask(len(TOKENS)))
    weights = found["weights"].tensor
    fig, axes = plt.subplots(
        2,
        heads // 2,
        figsize=(7.5, 6.2),
        layout="constrained",
        sharex=True,
        sharey=True,
    )
    for head, ax in enumerate(axes.flat):
        plot.attention_heatmap(
            weights[head].detach(),
            TOKENS,
            TOKENS,
            ax=ax,
            annotate=False,
            colorbar=False,
            title=f"head {head}",
        )
        ax.label_outer()  # tokens and axis names on the outer edges only
    shared_colorbar(fig, axes.flat)
    return fig


def encoder_decoder_weights(quick: bool) -> plt.Figure:
    """An (untrained) Transformer's decoder self-attention vs cross-attention, padded
    source."""
    torch.manual_seed(0)
    config = nt.TransformerConfig(
        encoder_layers=1, decoder_layers=1, layer=16, heads=2, hidden=32, dropout=0.0
    )
    model = nt.Transformer(20, 20, config).eval()
    source, target = torch.randint(3, 20, (1, 6)), torch.randint(3, 20, (1, 5))
    source_mask = nt.key_padding_mask(torch.tensor([4]), 6)  # 4 real tokens, 2 padding
    with nt.record(model, "stacks.decoder.layers.0.*.weights") as found:
        model(source, target, source_mask)
    layer = "stacks.decoder.layers.0"
    sources = ["das", "ist", "gut", "</s>", "<pad>", "<pad>"]
    targets = ["<s>", "this", "is", "good", "</s>"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
    plot.attention_heatmap(
        found[f"{layer}.self_attention.weights"].tensor[0, 0].detach(),
        targets,
        targets,
        ax=axes[0],
        colorbar=False,
        title="decoder self-attention (causal), head 0",
    )
    plot.attention_heatmap(
        found[f"{layer}.cross_attention.weights"].tensor[0, 0].detach(),
        targets,
        sources,
        ax=axes[1],
        colorbar=False,
        title="cross-attention over the memory, head 0",
    )
    axes[1].set_xlabel("seq (keys: the source, from the memory)")
    shared_colorbar(fig, axes)
    return fig


def rotary_rotation(quick: bool) -> plt.Figure:
    """RoPE: one pair turned at positions 0…7, the angle table, and a score that
    depends only on the distance."""
    from named_transformer.core.rotary import rotary_angles, rotate

    fig, axes = plt.subplots(1, 3, figsize=(13, 4), layout="constrained")
    # (a) pair 0 (θ_0 = 1 rad per position) of a 2-wide key, at positions 0 … 7
    vector = torch.tensor([1.0, 0.3])
    turned = rotate(repeat(vector, "key -> seq key", seq=8), rotary_angles(8, 2))
    ax = axes[0]
    colours = plt.get_cmap("viridis")(torch.linspace(0, 0.9, 8).tolist())
    for position, ((x, y), colour) in enumerate(
        zip(turned.tolist(), colours, strict=True)
    ):
        arrow = {"arrowstyle": "->", "color": colour}
        ax.annotate("", (x, y), (0, 0), arrowprops=arrow)
        ax.text(1.12 * x, 1.12 * y, f"s={position}", ha="center", va="center",
                fontsize=8, color=colour)  # fmt: skip
    ax.set(xlim=(-1.35, 1.35), ylim=(-1.35, 1.35), aspect="equal",
           xlabel="channel i", ylabel="channel i + |key|/2",
           title="one pair rotated by s·θ₀ (θ₀ = 1 rad)")  # fmt: skip
    ax.grid(alpha=0.3)
    # (b) cos Φ: the angle of every pair at every position
    seq, key = (32, 32) if quick else (64, 64)
    plot.table_heatmap(
        rotary_angles(seq, key).cos(), ax=axes[1], xlabel="pair i (pairs)",
        title=f"cos Φ = cos(s·θ_i), |key| = {key}",
    )  # fmt: skip
    # (c) R_s(q) ⊙_key R_t(k) for one query and one key at every s, t
    torch.manual_seed(0)
    q, k, positions = torch.randn(key), torch.randn(key), 16
    angles = rotary_angles(positions, key)
    queries = rotate(repeat(q, "key -> seq key", seq=positions), angles)
    keys = rotate(repeat(k, "key -> seq key", seq=positions), angles)
    scores = einsum(queries, keys, "seq_q key, seq key -> seq_q seq")
    plot.table_heatmap(
        scores, ax=axes[2], xlabel="key position t", ylabel="query position s",
        title="R_s(q) ⊙ R_t(k): constant along diagonals",
    )  # fmt: skip
    return fig


def alibi_bias_figure(quick: bool) -> plt.Figure:
    """ALiBi's bias -m_h (j - i) (query j, key i) for the 8 heads over 8 positions,
    the causal mask blanking the keys after the query."""
    from named_transformer.core.alibi import alibi_bias, alibi_slopes

    heads, seq = 8, 8
    slopes = alibi_slopes(heads)
    bias = alibi_bias(seq, seq, slopes).masked_fill(~nt.causal_mask(seq), torch.nan)
    fig, axes = plt.subplots(2, 4, figsize=(12, 6), layout="constrained")
    for h, ax in enumerate(axes.flat):
        plot.attention_heatmap(
            bias[h], ax=ax, vmin=-0.5 * (seq - 1), vmax=0.0, cmap="magma",
            colorbar=False, annotate=not quick and h == 0, fmt=".1f",
            title=f"head {h + 1}: m = 1/{round(1 / slopes[h].item())}",
        )  # fmt: skip
        ax.label_outer()
    fig.colorbar(axes[0, 0].images[0], ax=list(axes.flat), shrink=0.8,
                 label="bias −m_h (j − i), query j, key i")  # fmt: skip
    return fig


GQA_VARIANTS = [(8, "multi-head"), (2, "grouped-query"), (1, "multi-query")]


def grouped_heads(quick: bool) -> plt.Figure:
    """Which key/value head each of 8 query heads reads, for 8, 2 and 1 key/value
    heads, as computed by grouped_attention: value head g holds the one-hot e_g, so a
    query head's output names the head it read."""
    from named_transformer.models.grouped import grouped_attention

    generator = torch.Generator().manual_seed(0)
    heads, seq, key = 8, 3, 4
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), layout="constrained")
    colours = plt.get_cmap("tab10")
    for ax, (kv_heads, name) in zip(axes, GQA_VARIANTS, strict=True):
        queries = torch.randn(heads, 1, key, generator=generator)  # heads seq_q key
        keys = torch.randn(kv_heads, seq, key, generator=generator)  # kv_heads seq key
        values = repeat(
            torch.eye(kv_heads), "kv_heads val -> kv_heads seq val", seq=seq
        )
        reads = grouped_attention(queries, keys, values)[:, 0].argmax(-1)  # per head
        group = heads // kv_heads
        for h in range(heads):
            g = int(reads[h])
            x_kv = g * group + (group - 1) / 2  # under the middle of its group
            ax.plot([h, x_kv], [1, 0], color=colours(g % 10), linewidth=1.5)
            ax.scatter([h], [1], s=260, color=colours(g % 10), zorder=3)
            ax.text(h, 1, f"{h}", ha="center", va="center", fontsize=8, color="white",
                    zorder=4)  # fmt: skip
        for g in range(kv_heads):
            x_kv = g * group + (group - 1) / 2
            ax.scatter([x_kv], [0], s=420, marker="s", color=colours(g % 10), zorder=3)
            ax.text(x_kv, 0, f"{g}", ha="center", va="center", fontsize=8,
                    color="white", zorder=4)  # fmt: skip
        ax.set(xlim=(-0.7, heads - 0.3), ylim=(-0.45, 1.45), xticks=[],
               yticks=[0, 1], yticklabels=["K, V:\nkv_heads", "Q:\nheads"],
               title=f"{name}: kv_heads = {kv_heads}, group = {group}")  # fmt: skip
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
    return fig


def sliding_window(quick: bool) -> plt.Figure:
    """The causal mask, the sliding window of 3 and the attention weights under it."""
    from named_transformer.core.masks import sliding_window_mask

    generator = torch.Generator().manual_seed(3)
    tokens = ["<s>", "the", "cat", "sat", "on", "the", "mat", "."]
    seq, key, window = len(tokens), 4, 3
    queries = torch.randn(seq, key, generator=generator)
    keys = torch.randn(seq, key, generator=generator)
    mask = sliding_window_mask(seq, window=window)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), layout="constrained")
    for ax, shown, title in [
        (axes[0], nt.causal_mask(seq), "causal_mask(8)"),
        (axes[1], mask, f"sliding_window_mask(8, window={window})"),
    ]:
        plot.attention_heatmap(shown.float(), tokens, tokens, ax=ax, colorbar=False,
                               annotate=False, title=title, cmap="Greys_r")  # fmt: skip
    mask_colorbar(fig, axes[1])
    plot.attention_heatmap(
        nt.attention_weights(queries, keys, mask), tokens, tokens, ax=axes[2],
        annotate=not quick, title="attention_weights(Q, K, window mask)",
    )  # fmt: skip
    return fig


def kv_cache_size(quick: bool) -> plt.Figure:
    """The key/value cache's bytes while decoding: kv_heads 8, 2, 1, and a window."""
    from named_transformer.decoding import IncrementalDecoder
    from named_transformer.models.language_model import LanguageModel

    steps, window = (24, 8) if quick else (96, 16)
    sizes = dict(decoder_layers=2, layer=64, heads=8, hidden=128, dropout=0.0)
    variants = {
        f"{name} (kv_heads {kv})": {"kv_heads": kv} for kv, name in GQA_VARIANTS
    }
    variants[f"multi-head, window {window}"] = {"window": window}
    tokens = torch.randint(
        0, 50, (1, steps), generator=torch.Generator().manual_seed(0)
    )
    curves, allocated = {}, []
    for label, options in variants.items():
        torch.manual_seed(0)
        model = LanguageModel(50, nt.TransformerConfig(**sizes, **options)).eval()
        decoder = IncrementalDecoder(model)
        curves[label] = []
        for end in range(1, steps + 1):
            decoder(tokens[:, :end])
            curves[label].append(decoder.cache_bytes() / 1024)
            if "window" in options:
                allocated.append(decoder.cache_bytes(allocated=True) / 1024)
    curves[f"window {window}: allocated buffers"] = allocated
    ax = plot.line_plot(
        range(1, steps + 1), curves, xlabel="positions decoded",
        ylabel="cache held (KiB)",
        title="Key/value cache of 2 layers × 8 heads, float32, batch 1",
        styles={f"window {window}: allocated buffers": {"linestyle": ":"}},
    )  # fmt: skip
    return ax.figure


def online_softmax(quick: bool) -> plt.Figure:
    """The running maximum m and normaliser l of one query, block after block of keys,
    as blockwise_attention's own step updates them."""
    from named_transformer.core.blockwise import _online_softmax, _tile_scores

    generator = torch.Generator().manual_seed(11)
    seq, block, key = 64, 8, 16
    queries = torch.randn(1, key, generator=generator)  # one query: seq_q = 1
    keys = torch.randn(seq, key, generator=generator)
    keys = keys * torch.linspace(0.6, 1.4, seq)[:, None]  # later keys score higher
    values = torch.randn(seq, 3, generator=generator)
    scaled = queries / key**0.5
    maximum = torch.full((1, 1), -torch.inf)
    normaliser, outputs = torch.zeros(1, 1), torch.zeros(1, 3)
    ends, maxima, normalisers = [], [], []
    for start in range(0, seq, block):
        scores = _tile_scores(scaled, keys[start : start + block], None, None)
        maximum, normaliser, outputs = _online_softmax(
            scores, values[start : start + block], maximum, normaliser, outputs
        )
        ends.append(start + block)
        maxima.append(maximum.item())
        normalisers.append(normaliser.item())
    scores = nt.scaled_dot_score(queries, keys)[0]
    final = maxima[-1]
    rescaled = [n * torch.exp(torch.tensor(m - final)).item()
                for m, n in zip(maxima, normalisers, strict=True)]  # fmt: skip
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    plot.line_plot(
        range(seq), {"scores s_i": scores}, ax=left,
        styles={"scores s_i": {"linestyle": "none", "marker": "."}},
    )  # fmt: skip
    plot.line_plot(
        [0, *ends], {"running maximum m": [maxima[0], *maxima]}, ax=left,
        styles={"running maximum m": {"drawstyle": "steps-pre", "color": "C3"}},
        xlabel="key position (blocks of 8)", ylabel="score",
        title="One query's scores and the running maximum m",
    )  # fmt: skip
    left.legend(["scores s_i", "running maximum m"], fontsize=8)
    exact = torch.exp(scores - scores.max()).sum().item()
    plot.line_plot(
        ends,
        {
            "ℓ as held (relative to the current m)": normalisers,
            "ℓ · exp(m − m_final)": rescaled,
            "Σ exp(s − max s), all keys at once": [exact] * len(ends),
        },
        ax=right, markers=True,
        styles={"Σ exp(s − max s), all keys at once": {
            "linestyle": "--", "color": "grey", "marker": None}},
        xlabel="keys seen", ylabel="normaliser ℓ",
        title="The running normaliser ℓ, rescaled when m grows",
    )  # fmt: skip
    for ax in (left, right):
        for end in ends[:-1]:
            ax.axvline(end - 0.5 if ax is left else end, color="grey", alpha=0.2)
    return fig


FIGURE_MAKERS: dict[str, Callable[[bool], plt.Figure]] = {
    "soft-to-hard": soft_to_hard,
    "dot-variance": dot_variance,
    "causal-mask": masks,
    "padding-mask": padding,
    "basic-equivariance": basic_equivariance,
    "sinusoidal-positions": positions,
    "relative-positions": relative_positions,
    "multihead-weights": multihead_weights,
    "encoder-decoder-weights": encoder_decoder_weights,
    "grouped-heads": grouped_heads,
    "sliding-window-mask": sliding_window,
    "kv-cache-size": kv_cache_size,
    "rotary-rotation": rotary_rotation,
    "alibi-bias": alibi_bias_figure,
    "online-softmax": online_softmax,
}


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="few samples, low resolution, no layout pass",
    )
    parser.add_argument(
        "--out", type=Path, default=FIGURES, help=f"output directory ({FIGURES})"
    )
    parser.add_argument(
        "--only", nargs="*", choices=sorted(FIGURE_MAKERS), help="figures to draw"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    written = []
    for name in args.only or FIGURE_MAKERS:
        figure = FIGURE_MAKERS[name](args.quick)
        if args.quick:  # the layout pass measures every text again: 6 of 16 CPU-seconds
            figure.set_layout_engine("none")
        path = args.out / f"{name}.png"
        figure.savefig(path, dpi=40 if args.quick else 110, metadata={"Software": None})
        plt.close(figure)
        written.append(path)
        print(path)
    return written


if __name__ == "__main__":
    main()
