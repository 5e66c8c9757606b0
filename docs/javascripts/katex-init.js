// Render every pymdownx.arithmatex element with KaTeX (served from assets/katex/).
// The named-notation macros are defined here, once, for every page and every docstring:
//   \ndot{key}          ⊙ with the axis written beneath (contract over `key`)
//   \nfun{seq}{softmax} an operator with the axis written beneath
(function () {
  "use strict";

  var MACROS = {
    "\\ndot": "\\mathbin{\\underset{\\mathsf{#1}}{\\odot}}",
    "\\nfun": "\\underset{\\mathsf{#1}}{\\operatorname{#2}}",
  };

  function strip(tex) {
    tex = tex.trim();
    if (tex.startsWith("\\(") && tex.endsWith("\\)")) return [tex.slice(2, -2), false];
    if (tex.startsWith("\\[") && tex.endsWith("\\]")) return [tex.slice(2, -2), true];
    if (tex.startsWith("$$") && tex.endsWith("$$")) return [tex.slice(2, -2), true];
    return [tex, false];
  }

  function renderAll() {
    var elements = document.querySelectorAll(".arithmatex");
    for (var i = 0; i < elements.length; i++) {
      var element = elements[i];
      if (element.dataset.katex === "done") continue;
      var parts = strip(element.textContent);
      var display = parts[1] || element.tagName === "DIV";
      var tex = parts[0];
      if (display && /\$\$\s*\$\$/.test(tex)) {
        // Two $$ displays with no blank line between reach us as one block: stack them.
        tex = "\\begin{gathered}" + tex.split(/\$\$\s*\$\$/).join("\\\\") + "\\end{gathered}";
      }
      katex.render(tex, element, {
        displayMode: display,
        // A fresh copy per call: \gdef in one formula must not leak into the next.
        macros: Object.assign({}, MACROS),
        throwOnError: false, // a bad formula shows as .katex-error (the browser test fails on it)
        strict: "ignore",
      });
      element.dataset.katex = "done";
    }
    renderNavigation();
    document.documentElement.dataset.mathRendered = "true";
  }

  // A heading with math appears as plain text "\(...\)" in the table of contents and the
  // navigation (Python-Markdown's toc strips the markup): render those pieces too.
  var INLINE = /\\\(([\s\S]+?)\\\)/g;

  function renderNavigation() {
    var labels = document.querySelectorAll(".md-nav__link, .md-header__topic .md-ellipsis");
    for (var i = 0; i < labels.length; i++) {
      var walker = document.createTreeWalker(labels[i], NodeFilter.SHOW_TEXT);
      var nodes = [];
      while (walker.nextNode()) nodes.push(walker.currentNode);
      nodes.forEach(function (node) {
        var text = node.nodeValue;
        if (text.indexOf("\\(") < 0) return;
        var span = document.createElement("span");
        var last = 0;
        text.replace(INLINE, function (match, tex, offset) {
          span.appendChild(document.createTextNode(text.slice(last, offset)));
          var math = document.createElement("span");
          katex.render(tex, math, { macros: Object.assign({}, MACROS), throwOnError: false });
          span.appendChild(math);
          last = offset + match.length;
          return match;
        });
        span.appendChild(document.createTextNode(text.slice(last)));
        node.parentNode.replaceChild(span, node);
      });
    }
  }

  if (typeof document$ !== "undefined") {
    // Material's observable: fires on every page load, including instant navigation.
    document$.subscribe(renderAll);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", renderAll);
  } else {
    renderAll();
  }
})();
