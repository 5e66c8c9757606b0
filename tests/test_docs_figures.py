"""The figure script runs in quick mode; every figure a page links is committed.

Figures of long runs (training curves, alignments) may come from their own scripts under
docs/scripts/; they are committed like the rest and checked by the second test.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCRIPT = DOCS / "scripts" / "make_figures.py"
FIGURE_LINK = re.compile(r"\]\((?:\.\./)*figures/(?P<name>[\w./-]+?)\.(?:png|svg)\)")


def linked_figures() -> set[str]:
    return {
        m["name"]
        for page in DOCS.rglob("*.md")
        for m in FIGURE_LINK.finditer(page.read_text())
    }


def load_script():
    spec = importlib.util.spec_from_file_location("make_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_mode_draws_every_figure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is in the docs extra")
    script = load_script()  # in-process: torch is already imported, which saves seconds
    written = script.main(["--quick", "--out", str(tmp_path)])
    drawn = {p.stem for p in tmp_path.glob("*.png")}
    assert drawn == set(script.FIGURE_MAKERS) == {p.stem for p in written}
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG"), path


def test_linked_figures_are_committed() -> None:
    figures = DOCS / "figures"
    missing = [name for name in linked_figures() if not any(figures.glob(f"{name}.*"))]
    assert not missing, (
        f"pages link figures that are not committed under docs/figures/: {missing}; "
        "draw them with their script (docs/scripts/make_figures.py or the "
        "experiment's own) and commit them"
    )


def test_plot_functions_check_shapes() -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is in the docs extra")
    import matplotlib

    matplotlib.use("Agg")
    from jaxtyping import TypeCheckError

    from named_transformer import plot

    ax = plot.attention_heatmap(torch.rand(3, 5), ["a", "b", "c"], list("vwxyz"))
    assert len(ax.texts) == 15  # one annotation per weight
    ax = plot.line_plot([1, 2, 3], {"a": torch.tensor([1.0, 2.0, 3.0]), "b": [3, 2, 1]})
    assert len(ax.lines) == 2
    ax = plot.table_heatmap(torch.randn(4, 6))
    assert ax.images[0].get_array().shape == (4, 6)
    with pytest.raises(TypeCheckError, match="weights"):
        plot.attention_heatmap(torch.rand(2, 3, 4))
    import matplotlib.pyplot as plt

    plt.close("all")
