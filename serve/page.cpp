// page.cpp: the text of the page (see page.hpp).
#include "serve/page.hpp"

namespace facegen::serve {

const char* page_html() {
  return R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>facegen</title>
<style>
  body { font-family: sans-serif; margin: 1.5em; background: #fafafa; color: #222; }
  section { margin-bottom: 2em; }
  #grid { display: grid; grid-template-columns: repeat(8, 68px); gap: 4px; margin-top: 0.8em; }
  #grid img, #mix { width: 64px; height: 64px; image-rendering: pixelated; border: 2px solid #ddd; }
  #mix { width: 128px; height: 128px; }
  input[type=text] { width: 22em; }
  #error { color: #b00; min-height: 1.2em; }
</style>
</head>
<body>
<h1>facegen</h1>
<p id="error" role="alert"></p>
<section>
  <h2>Faces by seed</h2>
  <label>Seeds <input id="seeds" type="text" value="0-15"></label>
  <button id="show">Show</button>
  <button id="shuffle">Shuffle</button>
  <button id="save-grid">Download the grid</button>
  <div id="grid"></div>
</section>
<section>
  <h2>Between two faces</h2>
  <label>From seed <input id="seed-a" type="number" min="0" value="1"></label>
  <label>to seed <input id="seed-b" type="number" min="0" value="2"></label>
  <br><input id="t" type="range" min="0" max="100" value="50" style="width: 20em">
  <span id="t-text">0.50</span>
  <button id="save-mix">Download this face</button>
  <br><img id="mix" alt="the face between the two seeds">
</section>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const say = (text) => { $("error").textContent = text || ""; if (text) noteProblem(text); };
// Every script error and failure is counted on <body data-problems>, for tests in a headless browser.
function noteProblem(text) {
  document.body.dataset.problems = Number(document.body.dataset.problems || 0) + 1;
  console.error(text);
}
window.addEventListener("error", (e) => noteProblem(e.message));
window.addEventListener("unhandledrejection", (e) => noteProblem(String(e.reason)));

// The seeds of a list such as "3,5,100-103", as numbers (the server checks them again).
function seedsOf(text) {
  const seeds = [];
  for (const piece of text.split(",").map((p) => p.trim()).filter((p) => p)) {
    const range = piece.split("-");
    const first = Number(range[0]), last = Number(range.length > 1 ? range[1] : range[0]);
    if (!Number.isInteger(first) || !Number.isInteger(last) || first < 0 || last < first || last - first > 255) {
      throw new Error("'" + piece + "' is not a seed or a range of at most 256 seeds");
    }
    for (let s = first; s <= last; s++) seeds.push(s);
  }
  return seeds;
}

function showGrid() {
  say();
  let seeds;
  try { seeds = seedsOf($("seeds").value); } catch (e) { say(e.message); return; }
  const grid = $("grid");
  grid.replaceChildren();
  grid.dataset.loaded = 0;
  for (const s of seeds) {
    const img = document.createElement("img");
    img.src = "/v1/images/" + s + ".png";
    img.alt = img.title = "seed " + s;
    img.onclick = () => { $("seed-a").value = s; mixChanged(true); };
    img.onload = () => { grid.dataset.loaded = Number(grid.dataset.loaded || 0) + 1; };
    img.onerror = () => noteProblem("the face of seed " + s + " did not load");
    grid.appendChild(img);
  }
}

function shuffle() {
  const start = Math.floor(Math.random() * 1e9);
  $("seeds").value = Array.from({length: 16}, (_, k) => (start + k * 7919) % 1000000007).join(",");
  showGrid();
}

async function fetchOk(url, options) {
  const res = await fetch(url, options);
  if (!res.ok) {
    let sentence = "HTTP " + res.status;
    try { sentence = (await res.json()).error; } catch (e) {}
    throw new Error(sentence);
  }
  return res;
}

function download(blob, name) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

async function saveGrid() {
  say();
  try {
    const seeds = seedsOf($("seeds").value);
    const body = JSON.stringify({seeds: seeds, format: seeds.length === 1 ? "png" : "mosaic", columns: 8});
    const res = await fetchOk("/v1/generate", {method: "POST", body: body});
    download(await res.blob(), "faces.png");
  } catch (e) { say(e.message); }
}

// Along the great circle from a to b (as --interpolate walks), t in [0, 1].
function slerp(a, b, t) {
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  const cos = a.reduce((s, x, k) => s + x * b[k], 0) / (norm(a) * norm(b));
  const omega = Math.acos(Math.min(1, Math.max(-1, cos)));
  if (omega < 1e-6) return a.map((x, k) => (1 - t) * x + t * b[k]);
  const wa = Math.sin((1 - t) * omega) / Math.sin(omega), wb = Math.sin(t * omega) / Math.sin(omega);
  return a.map((x, k) => wa * x + wb * b[k]);
}

// FNV-1a of the bytes, in hex: lets a test (or a person) tell one face's PNG from another's.
function digest(bytes) {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h.toString(16);
}

let ends = null, endsKey = "", mixBlob = null, asking = 0;
async function mixChanged(seedsChanged) {
  const t = Number($("t").value) / 100;
  $("t-text").textContent = t.toFixed(2);
  const key = $("seed-a").value + "," + $("seed-b").value;
  const ask = ++asking;
  try {
    if (seedsChanged || key !== endsKey) {
      ends = (await (await fetchOk("/v1/latents?seeds=" + encodeURIComponent(key))).json()).latents;
      endsKey = key;
    }
    const body = JSON.stringify({latents: [slerp(ends[0], ends[1], t)], format: "png"});
    const blob = await (await fetchOk("/v1/generate", {method: "POST", body: body})).blob();
    if (ask !== asking) return;  // a later position answered first
    mixBlob = blob;
    $("mix").dataset.digest = digest(new Uint8Array(await blob.arrayBuffer()));
    const old = $("mix").src;
    $("mix").src = URL.createObjectURL(blob);
    if (old.startsWith("blob:")) URL.revokeObjectURL(old);
    say();
  } catch (e) { say(e.message); }
}

// A link may say where to start: #seeds=0-15&a=1&b=2&t=50 (t from 0 to 100).
for (const [key, value] of new URLSearchParams(location.hash.slice(1))) {
  const input = {seeds: "seeds", a: "seed-a", b: "seed-b", t: "t"}[key];
  if (input) $(input).value = value;
}
$("show").onclick = showGrid;
$("shuffle").onclick = shuffle;
$("save-grid").onclick = saveGrid;
$("seeds").onkeydown = (e) => { if (e.key === "Enter") showGrid(); };
$("t").oninput = () => mixChanged(false);
$("seed-a").onchange = $("seed-b").onchange = () => mixChanged(true);
$("save-mix").onclick = () => { if (mixBlob) download(mixBlob, "face-" + endsKey.replace(",", "-") + "-" + $("t").value + ".png"); };
showGrid();
mixChanged(true);
</script>
</body>
</html>
)PAGE";
}

}  // namespace facegen::serve
