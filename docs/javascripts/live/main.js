// Live attention widgets: start every .nt-live element of the page. This module is
// loaded on every page (mkdocs.yml extra_javascript), so where there is no widget it
// does nothing else: the widget code, onnxruntime-web and the models are imported
// only when a widget is found.

function start() {
  const found = document.querySelectorAll(".nt-live:not([data-state])");
  if (found.length === 0) return;
  // Marked at once: start() runs again on Material's document$ before the import ends.
  found.forEach((element) => { element.dataset.state = "loading"; });
  import("./widget.js").then(
    ({ mount }) => found.forEach((element) => mount(element)),
    (error) => found.forEach((element) => {
      element.dataset.state = "error";
      element.textContent = `The live widget's code did not load (${error.message}).`;
    }),
  );
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
// Material's instant navigation swaps pages without a load event; document$ tells.
if (window.document$?.subscribe) window.document$.subscribe(start);
