// One attention map as a figure: the weights as cells, the query tokens down the left,
// the key tokens along the bottom, the axis names, a title and a colour bar. The figure
// is a list of drawing commands, so the same figure goes to the page's <canvas>, to a
// PNG and to an SVG file without drawing it three ways.

// viridis (matplotlib's default, perceptually uniform, readable in grey) at 10 stops
const VIRIDIS = [
  [68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37],
];

export function colour(value) {
  const v = Math.min(1, Math.max(0, Number.isFinite(value) ? value : 0)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(v));
  const t = v - i;
  return VIRIDIS[i].map((c, k) => Math.round(c + t * (VIRIDIS[i + 1][k] - c)));
}

const rgb = ([r, g, b]) => `rgb(${r},${g},${b})`;
const FONT = 12;
const MAX_LABEL = 84; // px: longer token labels are shortened with "…"
const MAX_CELL = 36;

let measurer = null;
function measure(text, size, family, weight = "normal") {
  measurer ??= document.createElement("canvas").getContext("2d");
  measurer.font = `${weight} ${size}px ${family}`;
  return measurer.measureText(text).width;
}

function shorten(text, size, family, most = MAX_LABEL, weight = "normal") {
  const fits = (t) => measure(t, size, `${family}`, weight) <= most;
  if (fits(text)) return text;
  let cut = text;
  while (cut.length > 1 && !fits(`${cut}…`)) cut = cut.slice(0, -1);
  return `${cut}…`;
}

// Every n-th tick, so that labels `size` px tall never overlap on cells `cell` px apart.
const tickStep = (cell, size) => Math.max(1, Math.ceil((size + 1) / cell));

// The figure of `map` = {title, rows, cols, values (rows × cols), rowAxis, colAxis} drawn
// `width` px wide. `style` = {fg, muted, bg, family}. Returns {width, height, commands,
// grid: {x, y, cell, rows, cols}} (grid: where the cells are, for hover and tap).
export function figure(map, width, style) {
  const { family } = style;
  const rows = map.rows.length;
  const cols = map.cols.length;
  const rowLabels = map.rows.map((t) => shorten(t, FONT, family));
  const colLabels = map.cols.map((t) => shorten(t, FONT, family));
  const widest = (labels) => Math.max(0, ...labels.map((t) => measure(t, FONT, family)));
  const left = FONT + 6 + widest(rowLabels) + 6; // axis name, gap, tick labels, gap
  const right = 8 + 12 + 4 + measure("1.0", 10, family) + 2; // gap, colour bar, its ticks
  const top = FONT + 10;
  const bottom = 6 + widest(colLabels) + 6 + FONT + 4;
  const cell = Math.max(0.5, Math.min(MAX_CELL, (width - left - right) / Math.max(cols, 1)));
  const gridW = cell * cols;
  const gridH = cell * rows;
  const x0 = left;
  const y0 = top;
  const used = Math.ceil(left + gridW + right);
  const height = Math.ceil(top + gridH + bottom);
  const commands = [{ type: "rect", x: 0, y: 0, w: used, h: height, fill: style.bg }];
  const text = (t, x, y, options) => commands.push({ type: "text", text: t, x, y,
    size: FONT, fill: style.fg, anchor: "start", baseline: "middle", ...options });

  text(shorten(map.title, FONT, family, width, "bold"), 0, FONT / 2 + 2, { weight: "bold" });
  commands.push({ type: "cells", x: x0, y: y0, w: gridW, h: gridH, rows, cols,
    values: map.values });

  const rowStep = tickStep(cell, FONT);
  rowLabels.forEach((label, i) => {
    if (i % rowStep === 0) text(label, x0 - 6, y0 + (i + 0.5) * cell, { anchor: "end" });
  });
  const colStep = tickStep(cell, FONT);
  colLabels.forEach((label, j) => {
    if (j % colStep === 0) {
      text(label, x0 + (j + 0.5) * cell, y0 + gridH + 6, { anchor: "end", rotate: -90 });
    }
  });
  // The axis names, as in the equations: rows are queries (seq_q), columns keys (seq).
  text(map.rowAxis, FONT / 2 + 1, y0 + gridH / 2,
    { anchor: "middle", rotate: -90, fill: style.muted, italic: true });
  text(map.colAxis, x0 + gridW / 2, height - FONT / 2 - 2,
    { anchor: "middle", fill: style.muted, italic: true });

  // Colour bar: 0 at the bottom, 1 at the top (weights are probabilities: fixed scale).
  const barX = x0 + gridW + 8;
  const barH = Math.max(gridH, 40);
  const strips = 32;
  for (let s = 0; s < strips; s++) {
    commands.push({ type: "rect", x: barX, y: y0 + barH * (1 - (s + 1) / strips), w: 12,
      h: barH / strips + 0.5, fill: rgb(colour((s + 0.5) / strips)) });
  }
  for (const tick of [0, 0.5, 1]) {
    text(tick.toFixed(1), barX + 16, y0 + barH * (1 - tick), { size: 10, fill: style.muted });
  }
  return {
    width: Math.max(used, Math.ceil(barX + 16 + measure("1.0", 10, family) + 2)),
    height: Math.ceil(Math.max(height, y0 + barH + 8)),
    commands,
    grid: { x: x0, y: y0, cell, rows, cols },
  };
}

// --- renderers --------------------------------------------------------------------------

function font(command, family) {
  return `${command.italic ? "italic " : ""}${command.weight ?? "normal"} ` +
    `${command.size}px ${family}`;
}

// Draw figures (each {figure, dx, dy}) on `canvas`, `scale` device pixels per CSS pixel.
export function toCanvas(canvas, placed, width, height, scale, family) {
  canvas.width = Math.round(width * scale);
  canvas.height = Math.round(height * scale);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(scale, 0, 0, scale, 0, 0);
  ctx.clearRect(0, 0, width, height);
  for (const { figure: fig, dx, dy } of placed) {
    for (const c of fig.commands) {
      if (c.type === "rect") {
        ctx.fillStyle = c.fill;
        ctx.fillRect(c.x + dx, c.y + dy, c.w, c.h);
      } else if (c.type === "cells") {
        // One pixel per cell, scaled up without smoothing: sharp cells at any size.
        const pixels = new ImageData(c.cols, c.rows);
        for (let i = 0; i < c.rows * c.cols; i++) {
          pixels.data.set([...colour(c.values[i]), 255], 4 * i);
        }
        const tile = document.createElement("canvas");
        tile.width = c.cols;
        tile.height = c.rows;
        tile.getContext("2d").putImageData(pixels, 0, 0);
        ctx.imageSmoothingEnabled = false;
        ctx.drawImage(tile, c.x + dx, c.y + dy, c.w, c.h);
      } else if (c.type === "text") {
        ctx.save();
        ctx.translate(c.x + dx, c.y + dy);
        if (c.rotate) ctx.rotate((c.rotate * Math.PI) / 180);
        ctx.font = font(c, family);
        ctx.fillStyle = c.fill;
        ctx.textAlign = c.anchor === "middle" ? "center" : c.anchor;
        ctx.textBaseline = c.baseline;
        ctx.fillText(c.text, 0, 0);
        ctx.restore();
      }
    }
  }
}

const escape = (text) => String(text).replace(/[&<>"]/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const n = (x) => Number(x.toFixed(2));

// The same figures as an SVG document (one <rect> per cell, with its weight as a title).
export function toSVG(placed, width, height, family) {
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" font-family="${escape(family)}">`];
  for (const { figure: fig, dx, dy } of placed) {
    for (const c of fig.commands) {
      if (c.type === "rect") {
        out.push(`<rect x="${n(c.x + dx)}" y="${n(c.y + dy)}" width="${n(c.w)}" ` +
          `height="${n(c.h)}" fill="${c.fill}"/>`);
      } else if (c.type === "cells") {
        const w = c.w / c.cols;
        const h = c.h / c.rows;
        for (let i = 0; i < c.rows; i++) {
          for (let j = 0; j < c.cols; j++) {
            const v = c.values[i * c.cols + j];
            out.push(`<rect x="${n(c.x + dx + j * w)}" y="${n(c.y + dy + i * h)}" ` +
              `width="${n(w)}" height="${n(h)}" fill="${rgb(colour(v))}">` +
              `<title>${v.toFixed(4)}</title></rect>`);
          }
        }
      } else if (c.type === "text") {
        const anchor = c.anchor === "middle" ? "middle" : c.anchor === "end" ? "end" : "start";
        const rotate = c.rotate ? ` transform="rotate(${c.rotate})"` : "";
        out.push(`<g transform="translate(${n(c.x + dx)} ${n(c.y + dy)})">` +
          `<text${rotate} text-anchor="${anchor}" dominant-baseline="central" ` +
          `font-size="${c.size}" fill="${c.fill}"` +
          `${c.weight ? ` font-weight="${c.weight}"` : ""}` +
          `${c.italic ? ' font-style="italic"' : ""}>${escape(c.text)}</text></g>`);
      }
    }
  }
  out.push("</svg>");
  return out.join("\n");
}

// Which cell of a figure the point (x, y) (CSS px from the figure's corner) is in.
export function cellAt(grid, x, y) {
  const j = Math.floor((x - grid.x) / grid.cell);
  const i = Math.floor((y - grid.y) / grid.cell);
  if (i < 0 || j < 0 || i >= grid.rows || j >= grid.cols) return null;
  return { i, j };
}
