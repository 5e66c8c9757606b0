"""MkDocs hook: turn Sphinx roles left in docstrings into links to the API reference.

The package's docstrings say ``:func:`padding_mask``` or
``:class:`MultiHeadAttention```. mkdocstrings renders that as the literal text
``:func:`` followed by code. This hook rewrites each ``:role:<code>name</code>`` in a
page's HTML (outside code listings) into a link to the name's entry in the API
reference when the package defines it, and into plain code otherwise
(``nn.MultiheadAttention``). The API pages are found by reading the
``::: named_transformer.<module>`` directives under docs/reference/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mkdocs.utils import get_relative_url

ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc):"
    r"<code>~?(?P<name>[\w.]+)</code>"
)
DIRECTIVE = re.compile(
    r"^\s*:::\s+(?P<module>named_transformer[\w.]*)\s*$", re.MULTILINE
)
_targets: dict[
    str, str
] = {}  # "padding_mask" or "MultiHeadAttention.forward" -> url#anchor


def _public(name: str) -> bool:
    return not name.startswith("_")


def _index(docs: Path, root: Path, use_directory_urls: bool) -> dict[str, str]:
    targets: dict[str, str] = {}
    for page in sorted((docs / "reference").glob("*.md")):
        src = page.relative_to(docs).with_suffix("")
        url = f"{src.as_posix()}/" if use_directory_urls else f"{src.as_posix()}.html"
        for match in DIRECTIVE.finditer(page.read_text()):
            module = match["module"]
            path = root.joinpath(*module.split(".")).with_suffix(".py")
            if not path.is_file():
                continue
            targets.setdefault(module, f"{url}#{module}")
            targets.setdefault(module.rsplit(".", 1)[-1], f"{url}#{module}")
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.FunctionDef | ast.ClassDef) and _public(
                    node.name
                ):
                    anchor = f"{url}#{module}.{node.name}"
                    targets.setdefault(node.name, anchor)
                    targets.setdefault(f"{module}.{node.name}", anchor)
                if isinstance(node, ast.ClassDef) and _public(node.name):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef) and _public(item.name):
                            qualified = f"{node.name}.{item.name}"
                            anchor = f"{url}#{module}.{qualified}"
                            targets.setdefault(qualified, anchor)
                            targets.setdefault(f"{module}.{qualified}", anchor)
    return targets


def on_config(config):
    global _targets
    docs = Path(config.docs_dir)
    _targets = _index(
        docs, Path(config.config_file_path).resolve().parent, config.use_directory_urls
    )
    return config


def on_page_content(html: str, page, config, files) -> str:
    def link(match: re.Match[str]) -> str:
        name = match["name"]
        code = f"<code>{name}</code>"
        target = _targets.get(name) or _targets.get(
            name.removeprefix("named_transformer.")
        )
        if target is None:
            return code
        return f'<a href="{get_relative_url(target, page.url or "./")}">{code}</a>'

    return ROLE.sub(link, html)
