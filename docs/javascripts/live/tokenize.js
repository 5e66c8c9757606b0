// Text -> token ids, the way the Python side reads a user's input (the sidecar's
// "tokenizer" entry says how). Bad input is not an exception: encode() returns a
// sentence in `problem` naming what is wrong, and the widget shows it.

const TOKENIZERS = new URL("../../assets/live/vendor/tokenizers/tokenizers.min.mjs",
  import.meta.url);

// Spaces shown as ␣: a space token must be visible in a sentence and on a map.
export const visible = (token) => token.replace(/ /g, "␣");
const LONGEST_QUOTE = 24; // code points: a longer piece is quoted up to "…"
const quote = (text) => {
  const points = [...text];
  const shown = points.length > LONGEST_QUOTE
    ? `${points.slice(0, LONGEST_QUOTE - 1).join("")}…` : text;
  return `“${visible(shown)}”`;
};

// "x", "y" and "z"; past `most` items, "x", "y" and 7 more (a pasted page stays short)
function list(items, most = 6) {
  const quoted = items.slice(0, most).map(quote);
  if (items.length > most) return `${quoted.join(", ")} and ${items.length - most} more`;
  if (quoted.length < 2) return quoted.join("");
  return `${quoted.slice(0, -1).join(", ")} and ${quoted[quoted.length - 1]}`;
}

// "1 token", "5 tokens"
const counted = (n) => `${n} token${n === 1 ? "" : "s"}`;

const unique = (items) => [...new Set(items)];

// How a model reads: split the text into pieces, and name the pieces it cannot read.
const READERS = {
  digits: {
    empty: "Type some digits.",
    split: (text) => [...text].filter((c) => !/\s/u.test(c)),
    // Only 0-9: Python's str.isdigit() would also take "٣", which no vocabulary holds.
    unknown: (pieces) => unique(pieces.filter((c) => !/^[0-9]$/.test(c))),
    explain: (bad) =>
      `${list(bad, 12)} ${bad.length === 1 ? "is not a digit" : "are not digits"}; ` +
      "this model reads digits only.",
  },
  characters: {
    empty: "Type some text.",
    split: (text) => [...text.trim()], // code points, like Python's tuple(str)
    explain: (bad, known) =>
      `${list(bad, 12)} ${bad.length === 1 ? "is not a character" : "are not characters"} ` +
      `this model knows; it knows ${known.length}: ${visible(known.join(""))}.`,
  },
  words: {
    empty: "Type a sentence.",
    split: (text, spec) => {
      const source = spec.lowercase === false ? text : text.toLowerCase();
      return source.match(new RegExp(spec.pattern, "gu")) ?? [];
    },
    explain: (bad, known) =>
      `${list(bad)} ${bad.length === 1 ? "is not a word" : "are not words"} this model knows; ` +
      `it knows ${known.length} words, e.g. ${list(known.slice(0, 8), 8)}.`,
  },
};

// A reader over the sidecar's vocabulary (id = index; specials first). `trained`: the
// sidecar's trained_lengths {min, max}, for a model trained on a range of lengths.
function vocabularyTokenizer(spec, maxLength, trained) {
  const reader = READERS[spec.reads];
  const vocabulary = spec.vocabulary;
  const ids = new Map(vocabulary.map((token, id) => [token, id]));
  const specials = new Set(["pad", "bos", "eos", "unk"].map((key) => spec[key]));
  const known = vocabulary.filter((_, id) => !specials.has(id));
  return {
    label: (id) => vocabulary[id] ?? `#${id}`,
    encode(text) {
      const pieces = reader.split(text, spec);
      if (pieces.length === 0) {
        return { ids: [], tokens: [], problem: reader.empty, note: "", warning: false };
      }
      const bad = reader.unknown ? reader.unknown(pieces)
        : unique(pieces.filter((piece) => !ids.has(piece)));
      if (bad.length > 0) {
        return { ids: [], tokens: [], problem: reader.explain(bad, known), note: "",
          warning: false };
      }
      const cut = cutTo(pieces.map((piece) => ids.get(piece)), maxLength, null, trained);
      return { ...cut, tokens: cut.ids.map((id) => vocabulary[id]), problem: "" };
    },
  };
}

// Longer input is cut to the longest the model was trained on, with a note. `last`: a
// token that must stay last (WordPiece's [SEP]). `trained` ({min, max}, or undefined):
// the range of lengths the model was trained on; outside it the note is the warning the
// command line gives (named_transformer/workflows/cli.py, read_input).
function cutTo(ids, maxLength, last, trained) {
  const n = ids.length;
  const range = trained ? `the input has ${counted(n)} but the model was trained on ` +
    `${trained.min} to ${trained.max}` : "";
  if (!maxLength || n <= maxLength) {
    if (!range || (n >= trained.min && n <= trained.max)) return { ids, note: "", warning: false };
    return { ids, note: `Warning: ${range}; expect mistakes outside that range.`, warning: true };
  }
  const kept = last === null ? ids.slice(0, maxLength) : [...ids.slice(0, maxLength - 1), last];
  const note = range ? `Warning: ${range}; only the first ${maxLength} are used.`
    : `The input is ${n} tokens long; this model reads at most ${maxLength}, so only the ` +
      `first ${maxLength} are used.`;
  return { ids: kept, note, warning: Boolean(range) };
}

// WordPiece through @huggingface/tokenizers with the model's own tokenizer.json: ids
// include [CLS] ... [SEP], as Python's tokenizer returns them.
async function wordpieceTokenizer(spec, maxLength, models, fetchJSON) {
  const [{ Tokenizer }, json] = await Promise.all([
    import(TOKENIZERS.href),
    fetchJSON(new URL(spec.file, models)),
  ]);
  const tokenizer = new Tokenizer(json, {});
  return {
    label: (id) => tokenizer.id_to_token(id) ?? `#${id}`,
    encode(text) {
      if (text.trim() === "") {
        return { ids: [], tokens: [], problem: "Type a sentence.", note: "", warning: false };
      }
      const all = tokenizer.encode(text).ids.map(Number);
      const cut = cutTo(all, maxLength, all[all.length - 1]);
      return { ...cut, tokens: cut.ids.map((id) => tokenizer.id_to_token(id)), problem: "" };
    },
  };
}

// Characters of a fixed alphabet (the induction model), one token each, read as the
// recipe reads them (named_transformer/workflows/induction.py, encode): lowercased,
// any whitespace outside the alphabet as spec.whitespace and any other character as
// spec.other. Only blank text cannot be used; the chips show what each character became.
function alphabetTokenizer(spec, maxLength) {
  const vocabulary = spec.vocabulary;
  const ids = new Map(vocabulary.map((token, id) => [token, id]));
  const read = (c) => ids.get(spec.lowercase === false ? c : c.toLowerCase())
    ?? (/\s/u.test(c) ? spec.whitespace ?? spec.other : spec.other);
  return {
    label: (id) => vocabulary[id] ?? `#${id}`,
    encode(text) {
      if (text.trim() === "") {
        return { ids: [], tokens: [], problem: "Type some text.", note: "", warning: false };
      }
      const cut = cutTo([...text].map(read), maxLength, null);
      return { ...cut, tokens: cut.ids.map((id) => vocabulary[id]), problem: "" };
    },
  };
}

// The tokenizer a sidecar describes. `models`: the URL of the folder holding the sidecar
// (the tokenizer.json named by a WordPiece sidecar lies beside it).
export async function makeTokenizer(sidecar, models, fetchJSON) {
  const spec = sidecar.tokenizer;
  if (!spec || !spec.reads) throw new Error(`${sidecar.name}.json has no "tokenizer" entry`);
  if (spec.reads === "wordpiece") {
    return wordpieceTokenizer(spec, sidecar.max_length, models, fetchJSON);
  }
  if (spec.reads === "alphabet") return alphabetTokenizer(spec, sidecar.max_length);
  if (!(spec.reads in READERS)) {
    throw new Error(`${sidecar.name}.json: unknown tokenizer "${spec.reads}"`);
  }
  return vocabularyTokenizer(spec, sidecar.max_length, sidecar.trained_lengths);
}
