// attnkit explore: the page. Served by `attnkit explore` (it asks api/view for what it shows: the layer of
// the head view and matrix, every layer for the model view, the next-token row of the selected position)
// or embedded whole in one HTML file (a notebook output, a saved view: the data is in #explore-data).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const PRISTINE = "<!doctype html>\n" + document.documentElement.outerHTML;
  const dataNode = $("explore-data");
  const EMBEDDED = dataNode ? JSON.parse(dataNode.textContent) : null;
  const STATIC = EMBEDDED !== null;
  // temp: the slider's index; -1 until a table arrives, then that of temperature 1 (the model's own distribution)
  const state = { text: "", layer: 0, head: 0, pos: -1, view: "head", block: 0, steps: 0, temp: -1, mode: "greedy", seed: 0, snapshot: -1 };
  const DEEPER = ["lens", "attribution", "patching"];  // a decoder's interpretability views (interpret.js)
  let data = null;  // the latest payload
  let store = null;  // what has arrived for the input shown (see merge)
  let version = 0;
  let hover = -1;
  let inflight = false, pending = false, typedAt = null, lastAsked = null;
  window.exploreTimings = [];
  window.exploreData = () => data;  // the payload shown (for tests and the console)

  // ------------------------------------------------------------------ state <-> URL
  function readState(params) {
    for (const key of Object.keys(state)) {
      if (!params.has(key)) continue;
      const value = params.get(key);
      state[key] = typeof state[key] === "number" ? Number(value) || 0 : value;
    }
  }
  function writeUrl() {
    if (!/^(https?|file):$/.test(location.protocol)) return;  // a notebook's iframe has no URL of its own
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(state)) params.set(key, String(value));
    try { history.replaceState(null, "", "?" + params.toString()); } catch (e) { /* a sandboxed frame */ }
  }

  // ------------------------------------------------------------------ data
  const bytes = (b64) => { const s = atob(b64), out = new Uint8Array(s.length); for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i); return out; };
  function unpack(block) {  // Uint8Array [layers sent * H * Tq * Tk] of weights * 255
    const Tk = block.keys.length;
    const values = bytes(block.values);
    if (block.indices === null) return values;
    const raw = bytes(block.indices);
    const idx = block.index_bytes === 1 ? raw : new Uint16Array(raw.buffer);
    const rows = values.length / block.k, k = block.k;
    const out = new Uint8Array(rows * Tk);
    for (let row = 0; row < rows; row++) {
      for (let j = 0; j < k; j++) out[row * Tk + idx[row * k + j]] = values[row * k + j];
    }
    return out;
  }
  const inputKey = (p) => JSON.stringify([p.input.text, p.input.steps, p.input.temperature, p.input.seed, p.ids || p.tokens]);
  // store: per block, `layers[l]` (one layer's heads, whole) and `grid` (every layer, maybe top-k per row:
  // `gridBlock` says); `next`: position -> its next-token row. Reset when the input changes.
  function merge(payload) {
    const key = inputKey(payload);
    if (!store || store.key !== key) {
      store = { key, layers: payload.blocks.map(() => []), grid: payload.blocks.map(() => null), gridBlock: payload.blocks.map(() => null), next: new Map() };
    }
    payload.blocks.forEach((blk, b) => {
      const n = blk.heads * blk.queries.length * blk.keys.length, all = unpack(blk);
      if (blk.only_layer !== null && blk.only_layer !== undefined) { store.layers[b][blk.only_layer] = all; return; }
      store.grid[b] = all; store.gridBlock[b] = blk;
      if (blk.k === blk.keys.length) for (let l = 0; l < blk.layers; l++) store.layers[b][l] = all.subarray(l * n, (l + 1) * n);
    });
    const next = payload.next;
    if (next) next.positions.forEach((p, i) => store.next.set(p, { ids: next.ids[i], tokens: next.tokens[i], logits: next.logits[i], log_z: next.log_z[i] }));
  }
  function layerOf(b, layer, grid) {  // [H*Tq*Tk] bytes of one layer: whole, or the grid's (top-k) when allowed
    if (!grid && store.layers[b][layer]) return store.layers[b][layer];
    if ((grid || STATIC) && store.grid[b]) {
      const blk = data.blocks[b], n = blk.heads * blk.queries.length * blk.keys.length;
      return store.grid[b].subarray(layer * n, (layer + 1) * n);
    }
    return null;
  }
  function weights(b, layer, head, grid) {  // a view of [Tq*Tk] bytes, or null while it has not arrived
    const blk = data.blocks[b], n = blk.queries.length * blk.keys.length, all = layerOf(b, layer, grid);
    return all && all.subarray(head * n, (head + 1) * n);
  }
  const position = () => (state.pos >= 0 && state.pos < data.tokens.length ? state.pos : data.tokens.length - 1);
  function missing() {  // what the views need and the page does not have yet (null: nothing)
    const b = state.block;
    const need = {};
    if (state.view === "model" ? !store.grid[b] : !layerOf(b, state.layer, false)) need.layer = state.view === "model" ? "all" : state.layer;
    if (data.next && !store.next.has(position())) need.position = position();
    return Object.keys(need).length ? need : null;
  }
  function masked(blk, q, k) {
    return (blk.causal && k > q) || (blk.key_mask && !blk.key_mask[k]);
  }

  function setData(payload) {
    data = payload;
    merge(payload);
    state.block = Math.min(state.block, data.blocks.length - 1);
    const blk = data.blocks[state.block];
    state.layer = Math.min(state.layer, blk.layers - 1);
    state.head = Math.min(state.head, blk.heads - 1);
    if (state.pos >= blk.queries.length) state.pos = -1;
    if (data.input) { state.steps = data.input.steps; }
    fillSelect($("block"), data.blocks.map((b) => b.name), state.block);
    fillSelect($("layer"), range(blk.layers).map((i) => String(i + 1)), state.layer);
    fillSelect($("head"), range(blk.heads).map((i) => String(i + 1)), state.head);
    $("model-name").textContent = data.model.name + " \u00b7 " + data.model.source;
    $("hint").textContent = STATIC ? "a saved view: run `attnkit explore` to type other inputs" : "type " + data.model.hint;
    render();
  }
  const range = (n) => Array.from({ length: n }, (_, i) => i);
  function fillSelect(select, labels, value) {
    if (select.options.length !== labels.length) {
      select.innerHTML = "";
      labels.forEach((label, i) => select.add(new Option(label, String(i))));
    }
    select.value = String(value);
  }

  // ------------------------------------------------------------------ requests
  function body(full) {  // the request of the current state: what it shows, or everything (`full`: Save)
    const sent = { text: state.text, steps: state.steps, seed: Number(state.seed) || 0,
      temperature: state.mode === "sample" ? temperatures()[state.temp] || 1.0 : 0 };
    if (!full) { sent.layer = state.view === "model" ? "all" : state.layer; sent.position = state.pos; }
    if (!STATIC && window.attnkitInterpret) sent.snapshot = window.attnkitInterpret.snapshot(state.snapshot);
    return JSON.stringify(sent);
  }
  async function request() {
    if (STATIC) return;
    if (inflight) { pending = true; return; }
    inflight = true;
    const sent = body(false);
    lastAsked = sent;
    try {
      const response = await fetch("api/view", { method: "POST", headers: { "Content-Type": "application/json" }, body: sent });
      const answer = await response.json();
      if (!response.ok) { showError(answer.detail || response.statusText); }
      else {
        showError(null);
        answer.bytes = Number(response.headers.get("content-length")) || 0;
        const took = /dur=([\d.]+)/.exec(response.headers.get("server-timing") || "");
        answer.server_ms = took ? Number(took[1]) : null;  // the model and the payload, on the server
        setData(answer);
      }
    } catch (err) {
      showError("the explorer server does not answer (" + err.message + "); is `attnkit explore` still running?");
    } finally {
      inflight = false;
      if (pending) { pending = false; request(); }
    }
  }
  function showError(message) {
    $("error").hidden = !message;
    $("error").textContent = message || "";
  }
  function temperatures() { return data && data.next ? data.next.temperatures : [0, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0, 1.2, 1.5, 2.0]; }

  // ------------------------------------------------------------------ rendering
  function render() {
    const blk = data.blocks[state.block];
    const deeper = !STATIC && !!data.next && !!window.attnkitInterpret;  // served decoders only
    if (!deeper && DEEPER.includes(state.view)) state.view = "head";
    for (const view of ["head", "matrix", "model", ...DEEPER]) $("view-" + view).hidden = state.view !== view;
    for (const tab of document.querySelectorAll(".tab")) {
      tab.classList.toggle("active", tab.dataset.view === state.view);
      if (DEEPER.includes(tab.dataset.view)) tab.hidden = !deeper;
    }
    $("title").textContent = (data.title ? data.title + " \u00b7 " : "") + blk.name + ", layer " + (state.layer + 1) + ", head " + (state.head + 1);
    const notes = [];
    if (blk.causal) notes.push("causal mask: a token attends to itself and the tokens before it (masked cells hatched)");
    if (blk.key_mask && blk.key_mask.some((v) => !v)) notes.push("padding keys are masked (grey)");
    const need = missing();
    const grid = store.gridBlock[state.block];
    const topk = grid && grid.k < grid.keys.length && (state.view === "model" || !store.layers[state.block][state.layer]);
    if (topk) notes.push("each row keeps its " + grid.k + " largest weights (on average " + Math.round(grid.kept * 100) + " % of the row); the rest show as 0");
    $("note").textContent = notes.join("; ");
    if (need && !STATIC && need.layer !== undefined) loading($("view-" + state.view));
    else if (DEEPER.includes(state.view)) window.attnkitInterpret.draw(state.view, $("view-" + state.view), data);
    else if (state.view === "head") drawHead(blk); else if (state.view === "matrix") drawMatrix(blk); else drawModel(blk);
    drawNext();
    drawTask();
    if (deeper) window.attnkitInterpret.timeline(state, data, () => { state.steps = 0; request(); });
    writeUrl();
    if (need && !STATIC) {  // ask for it; the views are complete when it arrives
      if (inflight || body(false) !== lastAsked) request();
      return;
    }
    version += 1;
    document.body.dataset.version = String(version);
    document.body.dataset.text = data.input ? data.input.text : "";
    const size = data.bytes ? ", " + (data.bytes / 1024).toFixed(0) + " kB" : "";
    if (typedAt !== null) {
      const ms = performance.now() - typedAt;
      window.exploreTimings.push(ms);
      typedAt = null;
      const server = data.server_ms === null || data.server_ms === undefined ? "" : " (server " + data.server_ms.toFixed(0) + " ms)";
      $("status").textContent = "updated in " + ms.toFixed(0) + " ms" + server + size;
    } else if (!STATIC) {
      $("status").textContent = data.blocks.length + " block(s)" + size;
    }
  }
  function loading(root) {
    const note = document.createElement("div");
    note.className = "note"; note.textContent = "loading\u2026";
    root.replaceChildren(note);
  }
  function colour(w) {  // white -> blue
    const t = w / 255;
    return [Math.round(255 - 218 * t), Math.round(255 - 156 * t), Math.round(255 - 20 * t)];
  }

  function drawHead(blk) {
    const root = $("view-head");
    const Tq = blk.queries.length, Tk = blk.keys.length, w = weights(state.block, state.layer, state.head, false);
    const rowH = 18, width = 460, top = 20;
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("width", width);
    svg.setAttribute("height", top + rowH * Math.max(Tq, Tk) + 8);
    svg.id = "head-svg";
    const head = (x, label, anchor) => { const t = document.createElementNS(svgNS, "text"); t.setAttribute("x", x); t.setAttribute("y", 12); t.setAttribute("text-anchor", anchor); t.setAttribute("fill", "#6b7280"); t.textContent = label; svg.appendChild(t); };
    head(150, blk.query_axis || "query", "end");
    head(310, blk.key_axis || "key", "start");
    const prompt = data.prompt_length || Infinity;
    const lines = document.createDocumentFragment();
    for (let q = 0; q < Tq; q++) {
      for (let k = 0; k < Tk; k++) {
        const v = w[q * Tk + k];
        if (v < 5) continue;  // under 2 %: not drawn
        const line = document.createElementNS(svgNS, "line");
        line.setAttribute("x1", 156); line.setAttribute("y1", top + q * rowH + 9);
        line.setAttribute("x2", 304); line.setAttribute("y2", top + k * rowH + 9);
        line.setAttribute("stroke-width", 1 + 3 * v / 255);
        line.setAttribute("stroke-opacity", (v / 255).toFixed(3));
        line.setAttribute("class", "attn");
        line.dataset.q = q; line.dataset.k = k; line.dataset.w = v;
        lines.appendChild(line);
      }
    }
    svg.appendChild(lines);
    const label = (i, text, x, anchor, side) => {
      const t = document.createElementNS(svgNS, "text");
      t.setAttribute("x", x); t.setAttribute("y", top + i * rowH + 13); t.setAttribute("text-anchor", anchor);
      t.setAttribute("class", "tok" + (i >= prompt ? " generated" : ""));
      t.dataset.side = side; t.dataset.i = i;
      t.textContent = text.length > 18 ? text.slice(0, 17) + "\u2026" : text;
      svg.appendChild(t);
    };
    blk.queries.forEach((text, i) => label(i, text, 150, "end", "q"));
    blk.keys.forEach((text, i) => label(i, text, 310, "start", "k"));
    svg.addEventListener("mouseover", (e) => {
      const t = e.target.closest("text.tok");
      if (!t) return;
      highlight(svg, t.dataset.side, Number(t.dataset.i));
    });
    svg.addEventListener("mouseleave", () => highlight(svg, null, -1));
    svg.addEventListener("click", (e) => {
      const t = e.target.closest("text.tok");
      if (t && t.dataset.side === "q") { state.pos = Number(t.dataset.i); render(); }
    });
    root.replaceChildren(svg);
    if (hover >= 0 && hover < Tq) highlight(svg, "q", hover);
  }
  function highlight(svg, side, i) {
    hover = side === "q" ? i : -1;
    svg.classList.toggle("hovering", side !== null);
    for (const t of svg.querySelectorAll("text.tok")) t.classList.toggle("active", t.dataset.side === side && Number(t.dataset.i) === i);
    const attr = side === "k" ? "k" : "q";
    for (const line of svg.querySelectorAll("line.attn")) line.classList.toggle("hl", side !== null && Number(line.dataset[attr]) === i);
  }

  function paint(ctx, blk, w, cell, row) {
    const Tq = blk.queries.length, Tk = blk.keys.length;
    const image = ctx.createImageData(Tk * cell, Tq * cell);
    for (let q = 0; q < Tq; q++) {
      for (let k = 0; k < Tk; k++) {
        const off = masked(blk, q, k);
        const v = w[q * Tk + k];
        let rgb = off ? ((q + k) % 2 ? [214, 214, 220] : [236, 236, 240]) : colour(v);
        if (row >= 0 && q !== row && !off) rgb = rgb.map((c) => Math.round(255 - (255 - c) * 0.25));
        for (let dy = 0; dy < cell; dy++) {
          for (let dx = 0; dx < cell; dx++) {
            const p = ((q * cell + dy) * Tk * cell + k * cell + dx) * 4;
            image.data[p] = rgb[0]; image.data[p + 1] = rgb[1]; image.data[p + 2] = rgb[2]; image.data[p + 3] = 255;
          }
        }
      }
    }
    ctx.putImageData(image, 0, 0);
  }
  function drawMatrix(blk) {
    const root = $("view-matrix");
    const Tq = blk.queries.length, Tk = blk.keys.length, w = weights(state.block, state.layer, state.head, false);
    const cell = Math.max(2, Math.min(24, Math.floor(560 / Math.max(Tq, Tk))));
    const canvas = document.createElement("canvas");
    canvas.width = Tk * cell; canvas.height = Tq * cell; canvas.id = "matrix-canvas";
    paint(canvas.getContext("2d"), blk, w, cell, -1);
    const wrap = document.createElement("div");
    wrap.className = "matrix-wrap";
    const tip = document.createElement("div");
    tip.className = "tooltip"; tip.hidden = true;
    canvas.addEventListener("mousemove", (e) => {
      const q = Math.floor(e.offsetY / cell), k = Math.floor(e.offsetX / cell);
      if (q >= Tq || k >= Tk) return;
      tip.hidden = false;
      tip.style.left = e.offsetX + 12 + "px"; tip.style.top = e.offsetY + 12 + "px";
      tip.textContent = blk.queries[q] + " \u2192 " + blk.keys[k] + ": " + (masked(blk, q, k) ? "masked" : (w[q * Tk + k] / 255).toFixed(3));
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (e) => { state.pos = Math.floor(e.offsetY / cell); render(); });
    wrap.append(canvas, tip);
    const caption = document.createElement("div");
    caption.className = "note";
    caption.textContent = "rows: " + (blk.query_axis || "query") + " tokens; columns: " + (blk.key_axis || "key") + " tokens; white 0 \u2192 blue 1";
    root.replaceChildren(wrap, caption);
  }
  function drawModel(blk) {
    const root = $("view-model");
    const Tq = blk.queries.length, Tk = blk.keys.length;
    const strip = document.createElement("div");
    strip.className = "strip";
    blk.queries.forEach((text, i) => {
      const s = document.createElement("span");
      s.textContent = text; s.dataset.i = i;
      if (i === hover) s.classList.add("active");
      strip.appendChild(s);
    });
    const grid = document.createElement("div");
    grid.className = "grid";
    grid.style.gridTemplateColumns = "repeat(" + blk.heads + ", auto)";
    const cell = Math.max(1, Math.floor(96 / Math.max(Tq, Tk)));
    const canvases = [];
    for (let l = 0; l < blk.layers; l++) {
      for (let h = 0; h < blk.heads; h++) {
        const div = document.createElement("div");
        div.className = "cell" + (l === state.layer && h === state.head ? " selected" : "");
        const canvas = document.createElement("canvas");
        canvas.width = Tk * cell; canvas.height = Tq * cell;
        canvas.dataset.layer = l; canvas.dataset.head = h;
        paint(canvas.getContext("2d"), blk, weights(state.block, l, h, true), cell, hover);
        canvases.push(canvas);
        div.append(canvas, document.createTextNode("L" + (l + 1) + " H" + (h + 1)));
        div.addEventListener("click", () => { state.layer = l; state.head = h; state.view = "head"; setSelects(); render(); });
        grid.appendChild(div);
      }
    }
    strip.addEventListener("mouseover", (e) => {
      const s = e.target.closest("span");
      if (!s) return;
      hover = Number(s.dataset.i);
      for (const x of strip.children) x.classList.toggle("active", x === s);
      for (const c of canvases) paint(c.getContext("2d"), blk, weights(state.block, Number(c.dataset.layer), Number(c.dataset.head), true), cell, hover);
    });
    root.replaceChildren(strip, grid);
  }
  function setSelects() {
    $("block").value = String(state.block); $("layer").value = String(state.layer); $("head").value = String(state.head);
  }

  function drawNext() {
    const panel = $("next-panel");
    panel.hidden = !data.next;
    if (!data.next) return;
    const pos = position();
    const temps = data.next.temperatures;
    const slider = $("temperature");
    slider.max = String(temps.length - 1);
    if (state.temp < 0) state.temp = Math.max(0, temps.indexOf(1));
    state.temp = Math.min(state.temp, temps.length - 1);
    slider.value = String(state.temp);
    const t = temps[state.temp];
    $("temperature-value").textContent = t === 0 ? "0 (greedy)" : String(t);
    $("next-pos").textContent = "\u201c" + data.tokens[pos] + "\u201d (position " + (pos + 1) + ")";
    const next = store.next.get(pos);  // null until it arrives
    const table = $("next-table");
    table.innerHTML = "";
    if (next) {
      const logZ = next.log_z[state.temp];
      next.tokens.forEach((token, i) => {
        const p = t === 0 ? (i === 0 ? 1 : 0) : Math.exp(next.logits[i] / t - logZ);
        const row = table.insertRow();
        row.insertCell().textContent = token;
        const bar = document.createElement("div");
        bar.className = "bar"; bar.style.width = (p * 100).toFixed(1) + "%";
        row.insertCell().appendChild(bar);
        row.insertCell().textContent = (p * 100).toFixed(1) + " %";
        row.cells[2].className = "prob";
      });
    }
    $("steps").textContent = data.input.steps + " generated" + (data.finished ? " (ended)" : "");
    $("step").disabled = STATIC || data.finished;
    $("back").disabled = STATIC || data.input.steps === 0;
    const gen = $("generated");
    gen.innerHTML = "";
    data.tokens.forEach((token, i) => {
      const s = document.createElement("span");
      s.textContent = token.replace(/\u2423/g, " ");
      if (i >= data.prompt_length) s.className = "new";
      gen.appendChild(s);
    });
  }

  function drawTask() {
    const panel = $("task-panel");
    const bars = (title, names, probs, picked, target) => {
      const rows = names.map((name, i) => "<tr" + (i === picked ? ' class="picked"' : "") + "><td>" + escapeHtml(name) + (i === target ? " (true)" : "") +
        '</td><td style="width:50%"><div class="bar" style="width:' + (probs[i] * 100).toFixed(1) + '%"></div></td><td>' + (probs[i] * 100).toFixed(1) + " %</td></tr>");
      return "<h3>" + title + "</h3><table>" + rows.join("") + "</table>";
    };
    let html = "";
    if (data.items) {
      const it = data.items;
      html = bars("Odd one out: item " + it.predicted, it.probabilities.map((_, i) => "item " + i), it.probabilities, it.predicted, it.target);
    } else if (data.classes) {
      const c = data.classes;
      html = bars("Class: " + escapeHtml(c.names[c.predicted]), c.names, c.probabilities, c.predicted, -1);
      const pooled = c.pooled_attention[state.layer][state.head];
      html += "<h3>Attention of the pooled representation (" + c.pooling + " pooling), layer " + (state.layer + 1) + ", head " + (state.head + 1) + "</h3>";
      html += bars("", data.blocks[0].keys, pooled, -1, -1).replace("<h3></h3>", "");
    } else if (data.hypotheses) {
      html = "<h3>Hypotheses</h3><table>" + data.hypotheses.map((h) => "<tr><td>beam " + h.beam_size + "</td><td>" + escapeHtml(h.text) +
        "</td><td>" + (h.log_prob === null ? "" : h.log_prob.toFixed(3)) + "</td></tr>").join("") + "</table>";
    }
    panel.hidden = !html;
    panel.innerHTML = html;
  }
  function escapeHtml(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c])); }

  // ------------------------------------------------------------------ saving
  async function standalone() {
    let html = PRISTINE;
    if (!STATIC) {
      const [css, js] = await Promise.all(["static/explore.css", "static/explore.js"].map((u) => fetch(u).then((r) => r.text())));
      html = cut(html, "STYLE", "<style>" + css + "</style>");
      html = cut(html, "SCRIPT", "<script>" + js.replace(/<\/script/gi, "<\\/script") + "</script>");
    }
    let full = data;  // the page has what it shows; the file gets every layer and position
    if (!STATIC) full = await fetch("api/view", { method: "POST", headers: { "Content-Type": "application/json" }, body: body(true) }).then((r) => r.json());
    const saved = Object.assign({}, full, { state: Object.assign({}, state) });
    delete saved.bytes;
    delete saved.server_ms;
    const json = JSON.stringify(saved).replace(/</g, "\\u003c");
    return cut(html, "DATA", '<script id="explore-data" type="application/json">' + json + "</script>");
  }
  function cut(html, name, inner) {
    const start = html.indexOf("<!--" + name + "-->"), end = html.indexOf("<!--/" + name + "-->");
    return html.slice(0, start + name.length + 7) + inner + html.slice(end);
  }
  async function save() {
    const blob = new Blob([await standalone()], { type: "text/html" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = "attnkit-explore.html";
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }

  // ------------------------------------------------------------------ events
  $("text").addEventListener("input", () => {
    state.text = $("text").value; state.steps = 0; state.pos = -1;
    typedAt = performance.now();
    request();
  });
  $("block").addEventListener("change", () => { state.block = Number($("block").value); setData(data); });
  $("layer").addEventListener("change", () => { state.layer = Number($("layer").value); render(); });
  $("head").addEventListener("change", () => { state.head = Number($("head").value); render(); });
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => { state.view = tab.dataset.view; render(); });
  $("temperature").addEventListener("input", () => {
    state.temp = Number($("temperature").value);
    if (state.mode === "sample" && state.steps > 0) request(); else render();
  });
  for (const radio of document.querySelectorAll("input[name=mode]")) radio.addEventListener("change", () => { state.mode = radio.value; if (state.steps > 0) request(); else render(); });
  $("seed").addEventListener("change", () => { state.seed = Number($("seed").value) || 0; if (state.steps > 0) request(); });
  $("step").addEventListener("click", () => { state.steps += 1; state.pos = -1; request(); });
  $("back").addEventListener("click", () => { state.steps = Math.max(0, state.steps - 1); state.pos = -1; request(); });
  $("save").addEventListener("click", save);

  // ------------------------------------------------------------------ start
  if (STATIC) {
    Object.assign(state, EMBEDDED.state || {});
    if (location.search) readState(new URLSearchParams(location.search));
    $("text").value = EMBEDDED.input.text;
    $("text").readOnly = true;
    setData(EMBEDDED);
  } else {
    readState(new URLSearchParams(location.search));
    fetch("api/info").then((r) => r.json()).then((info) => {
      if (!location.search) state.text = info.example;
      $("text").value = state.text;
      request();
    });
  }
  for (const radio of document.querySelectorAll("input[name=mode]")) radio.checked = radio.value === state.mode;
  $("seed").value = String(state.seed);
})();
