// One live widget: <div class="nt-live" data-model="dates" data-text="12 March 2021"
// data-attention="cross" data-layout="heads" data-causal="true"></div>. data-layout:
// "heads" draws every head of the chosen layer, "all" every head of every layer (named
// layer.head, from 0, as the pages name them), otherwise one map is drawn.
// Typing re-runs the exported model (debounced) and redraws the attention map. What a
// test needs is on element.ntLive, with state and runs mirrored as data-* attributes.

import { loadModel } from "./model.js";
import { cellAt, figure, toCanvas } from "./heatmap.js";
import { element, makeControls } from "./controls.js";
import { savePNG, saveSVG } from "./save.js";
import { visible } from "./tokenize.js";

const DEBOUNCE_MS = 150;
const GAP = 16; // px between maps drawn side by side
const MIN_MAP = 180; // px: the narrowest a map drawn side by side may be
const LONGEST_CAPTION = 48; // code points of input (or output) the caption shows
const short = (text) => {
  const points = [...text];
  return points.length > LONGEST_CAPTION
    ? `${points.slice(0, LONGEST_CAPTION - 1).join("")}…` : text;
};

// The colours and font of the page (Material's variables: light and dark schemes).
function pageStyle(node) {
  const css = getComputedStyle(node);
  const variable = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    fg: variable("--md-default-fg-color", "#222"),
    muted: variable("--md-default-fg-color--light", "#666"),
    bg: variable("--md-default-bg-color", "#fff"),
    family: css.fontFamily || "sans-serif",
  };
}

// The attention entries the markup asks for: data-attention="cross" (or "self",
// "encoder self", several separated by commas) keeps the groups whose name holds one.
function wanted(sidecar, filter) {
  const words = (filter ?? "").split(",").map((w) => w.trim().toLowerCase()).filter(Boolean);
  const entries = sidecar.attention.filter((entry) =>
    words.length === 0 || words.some((word) => entry.group.toLowerCase().includes(word)));
  return entries.length > 0 ? entries : sidecar.attention;
}

// weights {dims, data}: the run's own Float32Array, never copied into plain numbers
// (MiniLM's 256-token maps are 4.7 M of them, which a test reads as bytes).
const weightsOf = (raw) => Object.fromEntries(Object.entries(raw).map(([name, tensor]) =>
  [name, { dims: tensor.dims.map(Number), data: tensor.data }]));

export async function mount(root) {
  const name = root.dataset.model ?? "";
  let raw = {};
  const live = {
    state: "loading", runs: 0, message: "", text: root.dataset.text ?? "", note: "",
    warning: false, caption: "",
    ids: {}, tokens: {}, output: "", probability: null, vector: null,
    queries: {}, keys: {}, latencyMs: null, computeMs: null,
    get weights() {
      return weightsOf(raw);
    },
  };
  root.ntLive = live;
  const setState = (state) => {
    live.state = state;
    root.dataset.state = state;
  };
  setState("loading");

  const title = element("div", { class: "nt-live__title", text: `Live: ${name}` });
  const input = element("input", { type: "text", class: "nt-live__input", spellcheck: "false",
    autocomplete: "off", "aria-label": `input to the ${name} model` });
  input.value = live.text;
  const message = element("p", { class: "nt-live__message", role: "status",
    text: `Loading the ${name} model…` });
  const tokens = element("div", { class: "nt-live__tokens" });
  const output = element("div", { class: "nt-live__output" });
  const maps = element("div", { class: "nt-live__maps" });
  const readout = element("p", { class: "nt-live__readout", "aria-live": "polite",
    text: "Hover over or tap a cell to read its weight." });
  root.replaceChildren(title, input, message, tokens, output);

  let model;
  try {
    model = await loadModel(name);
  } catch (error) {
    setState("error");
    live.message = `The live model “${name}” failed to load: ${error.message}.`;
    message.textContent = live.message;
    message.classList.add("nt-live__message--error");
    return;
  }
  const { sidecar } = model;
  // A trained task's sidecar title shows its training example ("copy: '4382…' → …"): the
  // widget's caption follows the reader's input instead (see captionFor()).
  const follows = sidecar.output === "tokens" || sidecar.output === "label";
  const caption = (text) => {
    live.caption = text;
    title.textContent = text;
  };
  caption(follows ? sidecar.name ?? name : sidecar.title ?? `Live: ${name}`);
  const perHead = root.dataset.layout === "heads";
  const all = root.dataset.layout === "all";
  // heads the sidecar names ({"induction": [1, 1], ...}): their maps' titles say so
  const roles = Object.entries(sidecar.roles ?? {});
  const role = (entry, h) => roles.filter(([, [l, k]]) => l === entry.layer && k === h)
    .map(([r]) => r).join(", ");
  const headName = (entry, h) => `${entry.layer}.${h}`;
  const controls = makeControls({
    entries: wanted(sidecar, root.dataset.attention), perHead, all,
    causal: Boolean(sidecar.causal),
    onSelect: () => draw(),
    onCausal: () => request(performance.now()),
    onSave: (format) => save(format),
  });
  if (sidecar.causal && root.dataset.causal === "true") {
    controls.node.querySelector("input[name=causal]").checked = true;
  }
  root.append(controls.node, maps, readout);

  let result = null; // the last successful computation, with its token labels
  let scene = null; // what is on screen: {placed, width, height, family, canvas}

  function draw() {
    maps.replaceChildren();
    scene = null;
    if (!result) return;
    const { entry, panels } = controls.selection();
    const style = pageStyle(root);
    const width = maps.clientWidth || root.clientWidth || 320;
    // side by side when there is room, wrapped into rows otherwise (all: one row per
    // layer when its heads fit)
    const across = Math.max(1, Math.min(all ? entry.heads : panels.length,
      Math.floor((width + GAP) / (MIN_MAP + GAP))));
    const each = Math.floor((width - GAP * (across - 1)) / across);
    const placed = [];
    let y = 0;
    let rowHeight = 0;
    panels.forEach(({ entry: shown, head: h }, n) => {
      const tensor = result.outputs[shown.output];
      const [, , q, k] = tensor.dims.map(Number);
      const named = role(shown, h);
      // one map per head: the caption above names the layer, each map its head
      const title = all ? `head ${headName(shown, h)}${named ? `: ${named} head` : ""}`
        : perHead ? `head ${h + 1}`
          : shown.heads > 1 ? `${shown.label}, head ${h + 1}` : shown.label;
      const fig = figure({
        title,
        rows: result.labels[shown.queries].map(visible),
        cols: result.labels[shown.keys].map(visible),
        values: tensor.data.subarray(h * q * k, (h + 1) * q * k),
        rowAxis: "seq_q", colAxis: "seq",
      }, each, style);
      if (n % across === 0 && n > 0) {
        y += rowHeight + GAP;
        rowHeight = 0;
      }
      placed.push({ figure: fig, dx: (n % across) * (each + GAP), dy: y, head: h,
        entry: shown, tensor, q, k, title });
      rowHeight = Math.max(rowHeight, fig.height);
    });
    const [q, k] = [placed[0].q, placed[0].k];
    const height = y + rowHeight;
    const used = Math.max(...placed.map((p) => p.dx + p.figure.width));
    const canvas = element("canvas", { class: "nt-live__canvas", role: "img",
      "aria-label": `${all ? `every head (${placed.length})` : entry.label}: ` +
        `attention weights of ${q} queries over ${k} keys` });
    canvas.style.width = `${used}px`;
    toCanvas(canvas, placed, used, height, window.devicePixelRatio || 1, style.family);
    if (perHead) maps.append(element("div", { class: "nt-live__caption", text: entry.label }));
    if (all) maps.append(element("div", { class: "nt-live__caption", text: allCaption() }));
    // where the first map's cells are, in CSS px of the canvas (tests aim at a cell), and
    // which maps are drawn, in order
    canvas.dataset.grid = JSON.stringify(placed[0].figure.grid);
    canvas.dataset.maps = JSON.stringify(placed.map((p) => ({ output: p.entry.output,
      layer: p.entry.layer, head: p.head, title: p.title })));
    maps.append(canvas);
    scene = { placed, width: used, height, family: style.family, canvas };
  }

  // "Every head, one row per layer, named layer.head: head 0.1 is the previous-token
  // head and head 1.1 the induction head (by their scores on repeated random tokens)."
  function allCaption() {
    const named = roles.map(([r, [l, h]], i) => `head ${l}.${h}${i ? "" : " is"} the ${r} head`);
    const which = named.length === 0 ? ""
      : `: ${named.slice(0, -1).join(", ")}${named.length > 1 ? " and " : ""}` +
        `${named[named.length - 1]} (by their scores on repeated random tokens)`;
    return `Every head, one row per layer, named layer.head${which}.`;
  }

  // Hover (mouse) and tap (touch, pen): the weight under the pointer and its tokens.
  function point(event) {
    if (!scene) return;
    const box = scene.canvas.getBoundingClientRect();
    // CSS may have narrowed the canvas (max-width: 100%): back to figure pixels
    const scale = scene.width / (box.width || scene.width);
    const x = (event.clientX - box.left) * scale;
    const y = (event.clientY - box.top) * scale;
    for (const { figure: fig, dx, dy, head, entry, q, k, tensor } of scene.placed) {
      const cell = cellAt(fig.grid, x - dx, y - dy);
      if (!cell) continue;
      const weight = tensor.data[head * q * k + cell.i * k + cell.j];
      const query = visible(result.labels[entry.queries][cell.i]);
      const key = visible(result.labels[entry.keys][cell.j]);
      const which = all ? `head ${headName(entry, head)}`
        : `${entry.label}${entry.heads > 1 ? `, head ${head + 1}` : ""}`;
      readout.textContent = `${which}: ` +
        `query “${query}” (seq_q ${cell.i}) → key “${key}” (seq ${cell.j}): ` +
        `weight ${weight.toFixed(4)}`;
      return;
    }
  }
  maps.addEventListener("pointermove", point);
  maps.addEventListener("pointerdown", point);

  async function save(format) {
    if (!scene) return;
    const { entry } = controls.selection();
    const stem = all ? `${name}-every-head`
      : `${name}-${entry.output.split(":")[0].replace(/\.weights$/, "")}` +
      (scene.placed.length === 1 && entry.heads > 1 ? `-head${scene.placed[0].head + 1}` : "");
    try {
      await (format === "png" ? savePNG : saveSVG)(scene, stem.replace(/[^\w.-]+/g, "-"));
    } catch (error) {
      readout.textContent = `Could not save: ${error.message}`;
    }
  }

  // `how`: "problem" (the input cannot be used), "warning" (used, but expect mistakes)
  // or "" (a plain note)
  function show(text, how) {
    message.textContent = text;
    message.hidden = text === "";
    message.classList.toggle("nt-live__message--problem", how === "problem");
    message.classList.toggle("nt-live__message--warning", how === "warning");
  }

  // "copy: “123” → “123”": what the model read (the tokens used, joined the way the
  // task writes them) and what it answered; the task's name alone when nothing ran.
  function captionFor(used, run) {
    if (!follows) return;
    if (!run) {
      caption(sidecar.name ?? name);
      return;
    }
    const read = used.join(sidecar.tokenizer.sep ?? "");
    caption(`${sidecar.name ?? name}: “${short(read)}” → “${short(run.output)}”`);
  }

  // One recomputation for the text in the box; `since`: the input event it answers.
  async function compute(since) {
    const started = performance.now();
    const text = input.value;
    const encoded = model.tokenizer.encode(text);
    Object.assign(live, { text, note: encoded.note, warning: Boolean(encoded.warning),
      message: encoded.problem });
    if (encoded.problem) {
      result = null;
      Object.assign(live, { ids: {}, tokens: {}, output: "", probability: null, vector: null,
        queries: {}, keys: {} });
      raw = {};
      show(encoded.problem, "problem");
      captionFor(encoded.tokens, null);
      tokens.replaceChildren();
      output.replaceChildren();
    } else {
      let run;
      try {
        run = await model.compute(encoded.ids, controls.causal);
      } catch (error) {
        setState("error");
        live.message = `Running the ${name} model failed: ${error.message}`;
        show(live.message, "problem");
        return;
      }
      const labels = {};
      for (const [input, ids] of Object.entries(run.inputs)) {
        labels[input] = ids.map((id) => model.tokenizer.label(id));
      }
      result = { ...run, labels };
      raw = {};
      for (const entry of sidecar.attention) raw[entry.output] = run.outputs[entry.output];
      Object.assign(live, {
        ids: Object.fromEntries(Object.entries(run.inputs).map(([k, v]) => [k, [...v]])),
        tokens: labels, output: run.output, probability: run.probability ?? null,
        vector: run.vector ? Array.from(run.vector) : null,
        queries: Object.fromEntries(sidecar.attention.map((e) => [e.output, labels[e.queries]])),
        keys: Object.fromEntries(sidecar.attention.map((e) => [e.output, labels[e.keys]])),
      });
      show(encoded.note, encoded.warning ? "warning" : "");
      captionFor(encoded.tokens, run);
      showTokens(encoded.tokens, run);
    }
    draw();
    const done = performance.now();
    live.computeMs = done - started;
    live.latencyMs = done - since;
    live.runs += 1;
    root.dataset.runs = String(live.runs);
  }

  function chips(items, cls) {
    return items.map((t) => element("span", { class: `nt-live__token ${cls}`, text: visible(t) }));
  }

  function showTokens(shown, run) {
    tokens.replaceChildren(element("span", { class: "nt-live__label", text: "tokens" }),
      ...chips(shown, ""));
    const parts = [element("span", { class: "nt-live__label", text: "output" })];
    if (sidecar.kind === "classifier") {
      parts.push(element("strong", { text: run.output }),
        ` (probability ${run.probability.toFixed(3)})`);
    } else if (sidecar.kind === "encoder") {
      if (run.vector) {
        const norm = Math.hypot(...run.vector);
        const first = Array.from(run.vector.slice(0, 3), (v) => v.toFixed(3)).join(", ");
        parts.push(`a sentence embedding of ${run.vector.length} numbers: ${first}, … ` +
          `(length ${norm.toFixed(3)})`);
      } else {
        parts.length = 0;
      }
    } else if (sidecar.kind === "language-model") {
      // the most probable next token after each one; marked where the text agrees
      parts[0].textContent = "next (predicted)";
      const ids = run.inputs.tokens;
      parts.push(...run.predicted.map((id, i) => element("span", {
        class: `nt-live__token nt-live__out${id === ids[i + 1] ? " nt-live__hit" : ""}`,
        title: i + 1 < ids.length ? (id === ids[i + 1] ? "the text agrees" : "the text differs")
          : "after the last token",
        text: visible(model.tokenizer.label(id)) })));
    } else {
      parts.push(...chips(run.predicted.map((id) => model.tokenizer.label(id)), "nt-live__out"),
        " → ", element("strong", { text: run.output || "(nothing)" }));
    }
    output.replaceChildren(...parts);
  }

  // Recompute once typing pauses; one recomputation at a time, the latest text last.
  let timer = null;
  let busy = false;
  let again = false;
  let since = performance.now();
  async function recompute() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    do {
      again = false;
      await compute(since);
    } while (again && live.state !== "error");
    busy = false;
  }
  function request(at) {
    since = at;
    clearTimeout(timer);
    timer = setTimeout(recompute, DEBOUNCE_MS);
  }
  input.addEventListener("input", (event) => request(event.timeStamp || performance.now()));

  // Redraw (no recomputation) when the widget's width or the colour scheme changes.
  let lastWidth = maps.clientWidth;
  new ResizeObserver(() => {
    if (maps.clientWidth !== lastWidth) {
      lastWidth = maps.clientWidth;
      draw();
    }
  }).observe(maps);
  new MutationObserver(() => draw()).observe(document.body,
    { attributes: true, attributeFilter: ["data-md-color-scheme"] });

  setState("ready");
  await recompute();
}
