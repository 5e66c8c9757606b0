// "Save as PNG" / "Save as SVG": the figures on screen, drawn again off screen at twice
// the resolution (PNG) or written as vectors (SVG), handed to the browser as a download.

import { toCanvas, toSVG } from "./heatmap.js";

function download(blob, filename) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  // The download has started reading the blob by the next turn; free it after a while.
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}

export function savePNG(scene, filename) {
  const canvas = document.createElement("canvas");
  toCanvas(canvas, scene.placed, scene.width, scene.height, 2, scene.family);
  return new Promise((resolve, reject) => {
    canvas.toBlob((blob) => {
      if (!blob) {
        reject(new Error("the browser could not encode the PNG"));
        return;
      }
      download(blob, `${filename}.png`);
      resolve(blob);
    }, "image/png");
  });
}

export function saveSVG(scene, filename) {
  const svg = toSVG(scene.placed, scene.width, scene.height, scene.family);
  const blob = new Blob([svg], { type: "image/svg+xml" });
  download(blob, `${filename}.svg`);
  return Promise.resolve(blob);
}
