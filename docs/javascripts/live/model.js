// A live model: its sidecar, its tokenizer and an onnxruntime-web session over the
// exported graph. The graph does all of the attention arithmetic; this file only feeds
// ids in, runs greedy argmax loops for the generating kinds, and hands the outputs on.

import { makeTokenizer } from "./tokenize.js";

// Pages live at different depths (/, /learn/basic-self-attention/ ...): every URL is
// taken relative to this file, which is javascripts/live/model.js under the site root.
const MODELS = new URL("../../assets/live/models/", import.meta.url);
const ORT = new URL("../../assets/live/vendor/onnxruntime-web/", import.meta.url);
const KINDS = ["encoder-decoder", "decoder-only", "classifier", "encoder", "language-model"];

export class LoadError extends Error {}

const sitePath = (url) => decodeURI(url.pathname);

async function fetchFile(url, as) {
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new LoadError(`could not fetch ${sitePath(url)} (${error.message})`);
  }
  if (!response.ok) throw new LoadError(`${sitePath(url)} answered HTTP ${response.status}`);
  try {
    return await (as === "json" ? response.json() : response.arrayBuffer());
  } catch (error) {
    throw new LoadError(`${sitePath(url)} is not readable ${as} (${error.message})`);
  }
}

const fetchJSON = (url) => fetchFile(url, "json");

let runtime = null;
function loadRuntime() {
  runtime ??= import(new URL("ort.wasm.min.mjs", ORT).href).then((ort) => {
    // The site is not cross-origin isolated (no SharedArrayBuffer): one thread, no proxy
    // worker. The .wasm and its glue are served beside the module, never from a CDN.
    ort.env.wasm.numThreads = 1;
    ort.env.wasm.proxy = false;
    ort.env.wasm.wasmPaths = ORT.href;
    return ort;
  });
  return runtime;
}

const argmax = (data, start, end) => {
  let best = start;
  for (let i = start + 1; i < end; i++) if (data[i] > data[best]) best = i; // first on ties
  return best - start;
};

let queue = Promise.resolve();

class Model {
  constructor(ort, session, sidecar, tokenizer) {
    this.ort = ort;
    this.session = session;
    this.sidecar = sidecar;
    this.tokenizer = tokenizer;
    this.kind = sidecar.kind;
    this.output = sidecar.outputs[0].name; // the model's usual output comes first
  }

  // One run at a time on the page: sessions share one WebAssembly instance, which runs
  // one graph at a time (two runs at once corrupt each other's outputs).
  run(inputs, causal) {
    const feeds = {};
    for (const [name, ids] of Object.entries(inputs)) {
      feeds[name] = new this.ort.Tensor("int64", BigInt64Array.from(ids, BigInt),
        [1, ids.length]);
    }
    if (this.sidecar.causal) {
      feeds[this.sidecar.causal.input] = new this.ort.Tensor("bool",
        new Uint8Array([causal ? 1 : 0]), []);
    }
    const result = queue.then(() => this.session.run(feeds));
    queue = result.catch(() => undefined);
    return result;
  }

  // Greedy decoding: append the argmax of the last position until <eos> or max_steps.
  // Returns the run whose inputs hold every predicted token but the final <eos>.
  async greedy(inputsFor, start) {
    const { eos } = this.sidecar.tokenizer;
    const sequence = [...start];
    const predicted = [];
    const steps = this.sidecar.max_steps ?? 0;
    let outputs = null;
    let stopped = false;
    for (let step = 0; step < steps && !stopped; step++) {
      outputs = await this.run(inputsFor(sequence));
      const logProbs = outputs[this.output];
      const vocab = logProbs.dims[logProbs.dims.length - 1];
      const end = logProbs.data.length;
      const next = argmax(logProbs.data, end - vocab, end);
      if (next === eos) stopped = true;
      else {
        sequence.push(next);
        predicted.push(next);
      }
    }
    if (!stopped) outputs = await this.run(inputsFor(sequence)); // maps of the last token too
    return { inputs: inputsFor(sequence), outputs, predicted };
  }

  // Run on the tokenized ids of the text: {inputs, outputs, predicted, output, ...}.
  async compute(ids, causal) {
    const { bos } = this.sidecar.tokenizer;
    if (this.kind === "encoder-decoder") {
      const run = await this.greedy((target) => ({ source: ids, target: [...target] }), [bos]);
      return { ...run, output: this.join(run.predicted) };
    }
    if (this.kind === "decoder-only") {
      const run = await this.greedy((tokens) => ({ tokens: [...tokens] }), [...ids, bos]);
      return { ...run, output: this.join(run.predicted) };
    }
    const inputs = { tokens: ids };
    const outputs = await this.run(inputs, causal);
    const result = outputs[this.output];
    if (this.kind === "language-model") {
      // one pass: the most probable next token at every position, no decoding loop
      const vocab = result.dims[result.dims.length - 1];
      const predicted = ids.map((_, i) => argmax(result.data, i * vocab, (i + 1) * vocab));
      return { inputs, outputs, predicted, output: this.join(predicted) };
    }
    if (this.kind === "classifier") {
      const best = argmax(result.data, 0, result.data.length);
      const labels = this.sidecar.labels ?? [];
      const label = labels[best] ?? `class ${best}`;
      return { inputs, outputs, output: label, probability: Math.exp(result.data[best]) };
    }
    // an encoder shows its output only when it is one vector (MiniLM's embedding)
    const vector = this.sidecar.output === "embedding" ? result.data : null;
    return { inputs, outputs, output: "", vector };
  }

  join(ids) {
    return ids.map((id) => this.tokenizer.label(id)).join(this.sidecar.separator ?? "");
  }
}

function check(sidecar, name) {
  if (!KINDS.includes(sidecar.kind)) {
    throw new LoadError(`${name}.json: unknown kind "${sidecar.kind}"`);
  }
  if (!Array.isArray(sidecar.outputs) || !Array.isArray(sidecar.attention)) {
    throw new LoadError(`${name}.json lists no "outputs" or no "attention"`);
  }
  sidecar.name ??= name;
  return sidecar;
}

async function open(name) {
  const sidecar = check(await fetchJSON(new URL(`${name}.json`, MODELS)), name);
  const graph = new URL(`${name}.onnx`, MODELS);
  const [ort, bytes, tokenizer] = await Promise.all([
    loadRuntime().catch((error) => {
      throw new LoadError(`onnxruntime-web did not load from ${sitePath(ORT)} (${error.message})`);
    }),
    fetchFile(graph, "arrayBuffer"),
    makeTokenizer(sidecar, MODELS, fetchJSON).catch((error) => {
      throw error instanceof LoadError ? error
        : new LoadError(`its tokenizer did not load (${error.message})`);
    }),
  ]);
  let session;
  try {
    session = await ort.InferenceSession.create(new Uint8Array(bytes), {
      executionProviders: ["wasm"],
    });
  } catch (error) {
    throw new LoadError(`onnxruntime-web could not open ${sitePath(graph)} (${error.message})`);
  }
  return new Model(ort, session, sidecar, tokenizer);
}

const opened = new Map();

// The model `name` (assets/live/models/<name>.json + .onnx), opened once per page.
export function loadModel(name) {
  if (!opened.has(name)) opened.set(name, open(name));
  return opened.get(name);
}
