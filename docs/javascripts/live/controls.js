// The widget's controls: which attention map to show (group, layer, head), the
// causal/bidirectional toggle when the graph takes one, and the save buttons.

function element(tag, attributes = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

let counter = 0;

function select(name, options, onChange) {
  const id = `nt-live-${name}-${++counter}`;
  const box = element("select", { id, name });
  const field = element("span", { class: "nt-live__field" },
    [element("label", { for: id, text: name }), box]);
  box.addEventListener("change", onChange);
  const fill = (items) => {
    const kept = box.value;
    box.replaceChildren(...items.map(([value, text]) => element("option", { value, text })));
    if (items.some(([value]) => value === kept)) box.value = kept;
    field.hidden = items.length < 2; // nothing to choose
  };
  fill(options);
  return { field, box, fill };
}

// entries: the sidecar's attention entries to offer; perHead: one map per head, so no
// head selector; all: every head of every entry at once, so no selector at all; causal:
// offer the toggle. Calls onSelect() when the map to show changes, onCausal(flag) when
// the toggle does, onSave("png" | "svg") on a button.
export function makeControls({ entries, perHead, all, causal, onSelect, onCausal, onSave }) {
  const groups = all ? [] : [...new Set(entries.map((entry) => entry.group))];
  const inGroup = (group) => entries.filter((entry) => entry.group === group);
  const group = select("attention", groups.map((g) => [g, g]), () => {
    layer.fill(layerOptions());
    head.fill(headOptions());
    onSelect();
  });
  const layerOptions = () => (all ? [] : inGroup(group.box.value))
    .map((entry) => [entry.output, `${entry.layer + 1}`]);
  const layer = select("layer", layerOptions(), () => {
    head.fill(headOptions());
    onSelect();
  });
  const current = () => entries.find((entry) => entry.output === layer.box.value);
  const headOptions = () => Array.from({ length: perHead || all ? 0 : current().heads },
    (_, h) => [`${h}`, `${h + 1}`]);
  const head = select("head", headOptions(), onSelect);

  const children = [group.field, layer.field, head.field];
  let toggle = null;
  if (causal) {
    toggle = element("input", { type: "checkbox", name: "causal" });
    toggle.addEventListener("change", () => onCausal(toggle.checked));
    children.push(element("label", { class: "nt-live__toggle",
      title: "causal: each query sees only the keys up to itself" },
    [toggle, " causal (off: bidirectional)"]));
  }
  const buttons = ["png", "svg"].map((format) => {
    const button = element("button", { type: "button", class: "md-button nt-live__save",
      text: `Save as ${format.toUpperCase()}` });
    button.addEventListener("click", () => onSave(format));
    return button;
  });
  children.push(element("span", { class: "nt-live__buttons" }, buttons));

  return {
    node: element("div", { class: "nt-live__controls" }, children),
    // The maps on show, one {entry, head} each: one head, every head of the entry
    // (perHead), or every head of every entry (all); `entry`: the first one's.
    selection() {
      const every = (entry) => Array.from({ length: entry.heads }, (_, h) => ({ entry, head: h }));
      const panels = all ? entries.flatMap(every)
        : perHead ? every(current()) : [{ entry: current(), head: Number(head.box.value) }];
      return { entry: panels[0].entry, panels };
    },
    get causal() {
      return toggle ? toggle.checked : false;
    },
  };
}

export { element };
