"""Drawing attention weights (`transformer-mt attention`): one sentence's maps as heatmap grids
(layer x head, one file per kind), the paper's Figure 3 view (every head of one layer for one
query token), and the raw weights as .npz. Layers are titled both ways, "layer 5 of 6
(index 4)", since the paper's "layer 5 of 6" does not say which it counts from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .attention_maps import KINDS, AttentionMaps

# N layers  H heads  Q queries  K keys


@dataclass
class SentenceAttention:
    """One sentence's weights, kind -> (N, H, Q, K), with the pieces on each axis."""

    maps: dict[str, np.ndarray]
    source: list[str]  # source pieces, EOS last
    target: list[str]  # decoder inputs: BOS, then the output pieces

    @classmethod
    def of(cls, maps: AttentionMaps, source: list[str], target: list[str]) -> SentenceAttention:
        return cls({kind: getattr(maps, kind)[:, 0].float().numpy() for kind in KINDS},
                   source, target)

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query pieces, key pieces) of one kind."""
        return {"encoder": (self.source, self.source), "decoder": (self.target, self.target),
                "cross": (self.target, self.source)}[kind]


def layer_title(i: int, n: int) -> str:
    return f"layer {i + 1} of {n} (index {i})"


def save_npz(view: SentenceAttention, path: Path) -> Path:
    """The weights and the pieces, readable with numpy.load(allow_pickle=False)."""
    np.savez_compressed(path, **view.maps, source=np.array(view.source, dtype=str),
                        target=np.array(view.target, dtype=str))
    return path


def _pyplot():
    """matplotlib's pyplot, drawing to files (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_grid(view: SentenceAttention, kind: str, path: Path) -> Path:
    """A layer x head grid of heatmaps of one kind (queries down, keys across)."""
    plt = _pyplot()
    weights = view.maps[kind]
    N, H = weights.shape[:2]
    queries, keys = view.axes(kind)
    size = 0.18 * max(len(keys), len(queries)) + 1.2
    fig, axes = plt.subplots(N, H, figsize=(size * H, size * N), squeeze=False)
    for i in range(N):
        for h in range(H):
            ax = axes[i][h]
            ax.imshow(weights[i, h], vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
            ax.set_title(f"{layer_title(i, N)}, head {h + 1}", fontsize=7)
            ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=6)
            ax.set_yticks(range(len(queries)), queries, fontsize=6)
    fig.suptitle(f"{kind} attention (rows: queries, columns: keys)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_from(view: SentenceAttention, query: int, layer: int, path: Path) -> Path:
    """The paper's Figure 3 view: from one source token, every head of one encoder layer, each
    head a colour, its weight on each token as the line's opacity."""
    plt = _pyplot()
    weights = view.maps["encoder"][layer, :, query]  # (H, K)
    H, K = weights.shape
    fig, ax = plt.subplots(figsize=(4, 0.3 * K + 1.5))
    colours = plt.get_cmap("tab10")
    for h in range(H):
        for k in range(K):
            ax.plot([0, 1], [query, k], color=colours(h % 10), alpha=float(weights[h, k]),
                    linewidth=2)
    for side in (0, 1):
        for k, piece in enumerate(view.source):
            ax.text(side + (0.05 if side else -0.05), k, piece, ha="left" if side else "right",
                    va="center", fontsize=8, weight="bold" if k == query and not side else None)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(K - 0.5, -0.5)
    ax.axis("off")
    N = view.maps["encoder"].shape[0]
    ax.set_title(f"encoder self-attention, {layer_title(layer, N)}, from "
                 f"'{view.source[query]}', {H} heads", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>attention</title>
<style>
body { font: 13px sans-serif; margin: 16px; }
select { margin-right: 12px; }
text { font-size: 11px; }
.dim { opacity: 0.15; }
</style></head><body>
<div>kind <select id="kind"></select> layer <select id="layer"></select>
head <select id="head"></select></div>
<h3 id="title"></h3>
<svg id="map" xmlns="http://www.w3.org/2000/svg"></svg>
<p>Rows: queries; columns: keys. Hover over a query to isolate its row.</p>
<script type="application/json" id="data">DATA</script>
<script>
const data = JSON.parse(document.getElementById("data").textContent);
const svgNS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
function options(select, values, labels) {
  select.innerHTML = "";
  values.forEach((v, i) => { const o = document.createElement("option");
    o.value = v; o.textContent = labels[i]; select.appendChild(o); });
}
function el(name, attrs, text) {
  const e = document.createElementNS(svgNS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function draw() {
  const kind = $("kind").value, layer = +$("layer").value, head = +$("head").value;
  const w = data.maps[kind][layer][head], [queries, keys] = data.axes[kind];
  const n = data.maps[kind].length, cell = 18, left = 110, top = 90;
  $("title").textContent = kind + " attention, layer " + (layer + 1) + " of " + n +
    " (index " + layer + "), head " + (head + 1);
  const svg = $("map");
  svg.innerHTML = "";
  svg.setAttribute("width", left + cell * keys.length + 10);
  svg.setAttribute("height", top + cell * queries.length + 10);
  keys.forEach((k, j) => svg.appendChild(el("text", {x: left + cell * j + 12, y: top - 6,
    transform: "rotate(-60 " + (left + cell * j + 12) + " " + (top - 6) + ")"}, k)));
  queries.forEach((q, i) => {
    const row = el("g", {"class": "row", "data-row": i});
    row.appendChild(el("text", {x: left - 6, y: top + cell * i + 13, "text-anchor": "end"}, q));
    keys.forEach((k, j) => row.appendChild(el("rect", {x: left + cell * j, y: top + cell * i,
      width: cell - 1, height: cell - 1, fill: "rgb(8,48,107)", "fill-opacity": w[i][j],
      "data-w": w[i][j].toFixed(6)})));
    row.addEventListener("mouseenter", () => svg.querySelectorAll(".row").forEach(
      (r) => r.classList.toggle("dim", r !== row)));
    row.addEventListener("mouseleave", () => svg.querySelectorAll(".row").forEach(
      (r) => r.classList.remove("dim")));
    svg.appendChild(row);
  });
}
function layers() {
  const m = data.maps[$("kind").value];
  options($("layer"), m.map((_, i) => i), m.map((_, i) => (i + 1) + " of " + m.length +
    " (index " + i + ")"));
  options($("head"), m[0].map((_, h) => h), m[0].map((_, h) => String(h + 1)));
}
options($("kind"), Object.keys(data.maps), Object.keys(data.maps));
["kind"].forEach((id) => $(id).addEventListener("change", () => { layers(); draw(); }));
["layer", "head"].forEach((id) => $(id).addEventListener("change", draw));
layers(); draw();
</script></body></html>
"""


def draw_html(view: SentenceAttention, path: Path) -> Path:
    """One self-contained page (inline SVG and JavaScript, nothing fetched: it opens from
    disk): kind, layer and head selectors; hovering a query isolates its row."""
    data = {"maps": {kind: np.round(w, 5).tolist() for kind, w in view.maps.items()},
            "axes": {kind: view.axes(kind) for kind in view.maps}}
    text = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    path.write_text(PAGE.replace("DATA", text), encoding="utf-8")
    return path
