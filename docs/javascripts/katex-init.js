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
      katex.render(parts[0], element, {
        displayMode: display,
        // A fresh copy per call: \gdef in one formula must not leak into the next.
        macros: Object.assign({}, MACROS),
        throwOnError: false, // a bad formula shows as .katex-error (the browser test fails on it)
        strict: "ignore",
      });
      element.dataset.katex = "done";
    }
    document.documentElement.dataset.mathRendered = "true";
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
