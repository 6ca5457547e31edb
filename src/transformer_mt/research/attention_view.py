"""Drawing attention weights (`transformer-mt attention`): one sentence's maps as heatmap grids
(layer x head, one file per kind), the paper's Figure 3 view (every head of one layer for one
query token), and the raw weights as .npz. Layers are titled both ways, "layer 5 of 6
(index 4)", since the paper's "layer 5 of 6" does not say which it counts from."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..inference.alignment import word_index
from ..inference.attention_maps import KINDS, AttentionMaps

# N layers  H heads  Q queries  K keys  W words

AXES = {"encoder": ("source", "source"), "decoder": ("target", "target"),
        "cross": ("target", "source")}  # (queries, keys) of each kind


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

    def words(self, specials: Collection[str]) -> SentenceAttention:
        """The same weights between words (pieces merged: '▁' begins a word, each of
        `specials` is one): a query word's row is the mean of its pieces' rows, a key word's
        weight the sum of its pieces', so rows still sum to 1."""
        def merge(pieces: list[str]) -> tuple[np.ndarray, list[str]]:
            index = word_index(pieces, specials)
            onehot_PW = np.eye(index[-1] + 1, dtype=np.float32)[index]
            names = ["".join(p for p, w in zip(pieces, index, strict=True) if w == k)
                     .replace("\u2581", "") or "\u2581" for k in range(index[-1] + 1)]
            return onehot_PW, names

        (src_PW, src_words), (tgt_PW, tgt_words) = merge(self.source), merge(self.target)
        axes = {"source": src_PW, "target": tgt_PW}
        maps = {}
        for kind, w_NHQK in self.maps.items():
            q, k = AXES[kind]
            mean_QW = axes[q] / axes[q].sum(0, keepdims=True)
            maps[kind] = np.einsum("nhqk,qw,kv->nhwv", w_NHQK, mean_QW, axes[k])
        return SentenceAttention(maps, src_words, tgt_words)

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query pieces, key pieces) of one kind."""
        query, key = AXES[kind]
        return getattr(self, query), getattr(self, key)


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


def _lines(weights_QK: np.ndarray, pieces: list[str], colours: list, title: str, path: Path,
           bold: int | None = None) -> Path:
    """The paper's Figures 3-4 layout: the tokens in two columns, a line from query q (left)
    to key k (right) for each weight, its opacity the weight; colours[q] colours q's lines
    (a colour per head in Figure 3: weights_QK then holds one row per head)."""
    plt = _pyplot()
    K = len(pieces)
    fig, ax = plt.subplots(figsize=(4, 0.3 * K + 1.5))
    for q, row in enumerate(weights_QK):
        y = bold if bold is not None else q
        for k in range(K):
            ax.plot([0, 1], [y, k], color=colours[q], alpha=float(row[k]), linewidth=2)
    for side in (0, 1):
        for k, piece in enumerate(pieces):
            ax.text(side + (0.05 if side else -0.05), k, piece, ha="left" if side else "right",
                    va="center", fontsize=8, weight="bold" if k == bold and not side else None)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(K - 0.5, -0.5)
    ax.axis("off")
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_from(view: SentenceAttention, query: int, layer: int, path: Path) -> Path:
    """The paper's Figure 3 view: from one source token, every head of one encoder layer, each
    head a colour, its weight on each token as the line's opacity."""
    weights_HK = view.maps["encoder"][layer, :, query]
    N, H = view.maps["encoder"].shape[:2]
    tab10 = _pyplot().get_cmap("tab10")
    return _lines(weights_HK, view.source, [tab10(h % 10) for h in range(H)],
                  f"encoder self-attention, {layer_title(layer, N)},\nfrom "
                  f"'{view.source[query]}', {H} heads", path, bold=query)


def draw_head(view: SentenceAttention, layer: int, head: int, path: Path) -> Path:
    """The paper's Figure 4 (top) view: one head of one encoder layer, every token's attention
    as lines to every token, the line's opacity the weight."""
    weights_QK = view.maps["encoder"][layer, head]
    N = view.maps["encoder"].shape[0]
    colour = _pyplot().get_cmap("tab10")(head % 10)
    return _lines(weights_QK, view.source, [colour] * len(weights_QK),
                  f"encoder self-attention, {layer_title(layer, N)},\nhead {head + 1} "
                  f"(index {head}), full attention", path)


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


def save_bertviz(view: SentenceAttention, path: Path) -> Path:
    """The weights in the layout of bertviz's head view (the `params` its head_view.js reads:
    one entry per kind, named Encoder, Decoder and Cross as bertviz names them, weights as
    (layers, heads, queries, keys), left_text the queries, right_text the keys)."""
    names = {"encoder": "Encoder", "decoder": "Decoder", "cross": "Cross"}
    attention = [{"name": names[kind], "attn": np.round(view.maps[kind], 6).tolist(),
                  "left_text": view.axes(kind)[0], "right_text": view.axes(kind)[1]}
                 for kind in KINDS]
    n = view.maps["encoder"].shape[0]
    params = {"attention": attention, "default_filter": "0", "root_div_id": "bertviz",
              "layer": None, "heads": None, "include_layers": list(range(n))}
    path.write_text(json.dumps(params, ensure_ascii=False), encoding="utf-8")
    return path


def draw_html(view: SentenceAttention, path: Path) -> Path:
    """One self-contained page (inline SVG and JavaScript, nothing fetched: it opens from
    disk): kind, layer and head selectors; hovering a query isolates its row."""
    data = {"maps": {kind: np.round(w, 5).tolist() for kind, w in view.maps.items()},
            "axes": {kind: view.axes(kind) for kind in view.maps}}
    text = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    path.write_text(PAGE.replace("DATA", text), encoding="utf-8")
    return path
