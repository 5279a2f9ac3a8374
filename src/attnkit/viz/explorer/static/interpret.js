// attnkit explore: a decoder's interpretability views (served pages only; explore.js calls draw for the tabs
// "Logit lens", "Attribution" and "Patching"). Each asks its endpoint (api/lens, api/attribution, api/patching,
// api/ablation) for the input's text and keeps the answers of that text.
"use strict";
(function () {
  const answers = new Map();  // request body -> answer (or {error}), for the text and weights shown
  let text = null, shown = null, steps = [];  // shown: [text, snapshot]; steps: the run's snapshot steps
  const off = new Set();  // the heads switched off, "layer,head" (from 0)
  let target = "", corrupted = "";
  const el = (tag, cls, content) => { const e = document.createElement(tag); if (cls) e.className = cls; if (content !== undefined) e.textContent = content; return e; };
  const pct = (p) => (p * 100).toFixed(1) + " %";

  async function ask(path, body, redraw) {  // the answer if it has arrived, else null (redraw() when it does)
    body = Object.assign({}, body, { snapshot: shown[1] });
    const key = path + JSON.stringify(body);
    if (answers.has(key)) return answers.get(key);
    answers.set(key, null);
    try {
      const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      const answer = await response.json();
      answers.set(key, response.ok ? answer : { error: answer.detail || response.statusText });
    } catch (err) {
      answers.set(key, { error: "the explorer server does not answer (" + err.message + ")" });
    }
    redraw();
    return answers.get(key);
  }
  function got(path, body, redraw) {  // the answer now, or null after asking for it
    const key = path + JSON.stringify(Object.assign({}, body, { snapshot: shown[1] }));
    if (!answers.has(key)) ask(path, body, redraw);
    return answers.get(key) || null;
  }
  function status(root, answer) {  // true when the answer is there to draw
    if (answer && !answer.error) return true;
    const note = el("div", answer ? "error" : "note", answer ? answer.error : "computing\u2026");
    root.replaceChildren(note);
    return false;
  }
  function heat(v) {  // -1 red .. 0 white .. 1 blue
    const t = Math.max(-1, Math.min(1, v));
    return t >= 0 ? `rgb(${Math.round(255 - 218 * t)},${Math.round(255 - 156 * t)},${Math.round(255 - 20 * t)})`
      : `rgb(${Math.round(255 + 35 * t)},${Math.round(255 + 217 * t)},${Math.round(255 + 217 * t)})`;
  }
  function header(table, tokens, corner) {
    const row = table.insertRow();
    row.appendChild(el("th", "", corner));
    tokens.forEach((t) => row.appendChild(el("th", "tok", t)));
  }

  function drawLens(root, redraw) {
    const lens = got("api/lens", { text }, redraw);
    if (!status(root, lens)) return;
    const table = el("table", "lens");
    table.id = "lens-table";
    header(table, lens.tokens, "layer \\ position");
    lens.rows.forEach((name, l) => {
      const row = table.insertRow();
      row.appendChild(el("th", "", name));
      lens.top_tokens[l].forEach((token, t) => {
        const cell = row.insertCell();
        const p = lens.top_probs[l][t];
        cell.className = "lens-cell"; cell.textContent = token; cell.style.background = heat(p);
        cell.dataset.layer = l; cell.dataset.pos = t; cell.dataset.p = p; cell.title = token + ": " + pct(p);
      });
    });
    root.replaceChildren(table, el("div", "note", "each cell: the most likely next token if the model stopped at that layer, and its probability (white 0 \u2192 blue 1); the last row is the model's own prediction"));
  }

  function bars(values, scale, onClick) {
    const row = el("div", "attr-row");
    values.forEach(([label, v, cls], i) => {
      const b = el("button", "attr-bar " + (cls || ""));
      b.type = "button";
      const bar = el("span", "fill");
      bar.style.height = Math.max(1, Math.round(40 * Math.abs(v) / scale)) + "px";
      bar.style.background = v >= 0 ? "var(--line)" : "var(--hl)";
      b.append(bar, el("span", "name", label));
      b.title = label + ": " + v.toFixed(3);
      b.dataset.value = v;
      if (onClick) b.addEventListener("click", () => onClick(i)); else b.disabled = true;
      row.appendChild(b);
    });
    return row;
  }
  function drawAttribution(root, redraw) {
    const body = { text };
    if (target.trim()) body.target = /^\d+$/.test(target.trim()) ? Number(target.trim()) : target;
    const attr = got("api/attribution", body, redraw);
    const form = el("div", "deeper-form");
    const input = el("input");
    input.id = "attr-target"; input.placeholder = "the top next token"; input.value = target;
    input.addEventListener("change", () => { target = input.value; redraw(); });
    const label = el("label", "", "target token ");
    label.appendChild(input);
    form.appendChild(label);
    const body2 = el("div");
    root.replaceChildren(form, body2);
    if (!status(body2, attr)) return;
    const scale = Math.max(1e-6, ...attr.heads.flat().map(Math.abs), ...attr.mlps.map(Math.abs));
    const out = [el("div", "title", "direct attribution to \u201c" + attr.target.token + "\u201d after \u201c" + attr.tokens[attr.position] + "\u201d (logit " + attr.total.toFixed(3) + "): click a head to switch it off")];
    attr.heads.forEach((heads, l) => {
      const line = el("div", "attr-layer");
      line.appendChild(el("span", "attr-label", "block " + (l + 1)));
      const row = bars(heads.map((v, h) => ["H" + (h + 1), v, off.has(l + "," + h) ? "off" : ""]), scale, (h) => {
        const key = l + "," + h;
        if (off.has(key)) off.delete(key); else off.add(key);
        redraw();
      });
      row.querySelectorAll("button").forEach((b, h) => { b.dataset.layer = l; b.dataset.head = h; b.classList.add("head-switch"); });
      line.append(row, bars([["MLP", attr.mlps[l], "mlp"]], scale, null));
      out.push(line);
    });
    out.push(el("div", "note", "embeddings " + attr.embed.toFixed(3) + ", biases " + attr.rest.toFixed(3) + "; bars: blue raises the logit, red lowers it"));
    out.push(drawAblation(redraw));
    body2.replaceChildren(...out);
  }
  function drawAblation(redraw) {
    const box = el("div", "ablation");
    box.id = "ablation";
    const heads = [...off].map((k) => k.split(",").map(Number)).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const abl = got("api/ablation", { text, heads }, redraw);
    const names = heads.map(([l, h]) => "L" + (l + 1) + "H" + (h + 1)).join(", ");
    box.appendChild(el("h3", "", heads.length ? "Next token with " + names + " off" : "Next token (click heads to switch them off)"));
    if (!abl || abl.error) { box.appendChild(el("div", abl ? "error" : "note", abl ? abl.error : "computing\u2026")); return box; }
    const table = el("table", "ablation-table");
    const head = table.insertRow();
    ["token", "model", "heads off"].forEach((t) => head.appendChild(el("th", "", t)));
    abl.base.tokens.forEach((token, i) => {
      const row = table.insertRow();
      row.insertCell().textContent = token;
      row.insertCell().textContent = pct(abl.base.probs[i]);
      row.insertCell().textContent = pct(abl.ablated_of_base[i]);
      row.cells[2].className = "prob-off";
    });
    box.append(table, el("div", "note", "temperature 1; total variation between the two distributions: " + abl.tv.toFixed(4)));
    if (heads.length) {
      const clear = el("button", "", "switch all on");
      clear.type = "button"; clear.id = "heads-on";
      clear.addEventListener("click", () => { off.clear(); redraw(); });
      box.appendChild(clear);
    }
    return box;
  }

  function drawPatching(root, redraw) {
    const form = el("div", "deeper-form");
    const input = el("input");
    input.id = "corrupted"; input.placeholder = "a corrupted text of the same token length"; input.value = corrupted;
    const label = el("label", "grow", "corrupted ");
    label.appendChild(input);
    const go = el("button", "", "patch");
    go.type = "button"; go.id = "patch";
    const run = () => { corrupted = input.value; redraw(); };
    go.addEventListener("click", run);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") run(); });
    form.append(label, go);
    const body = el("div");
    root.replaceChildren(form, body);
    if (!corrupted) { body.appendChild(el("div", "note", "type a corrupted version of the input (same number of tokens, e.g. one word changed) and patch: each cell runs the corrupted text with the residual stream entering that block at that position taken from the clean one")); return; }
    const patch = got("api/patching", { clean: text, corrupted }, redraw);
    if (!status(body, patch)) return;
    const table = el("table", "lens");
    table.id = "patching-table";
    header(table, patch.tokens.map((t, i) => t === patch.corrupted_tokens[i] ? t : t + " / " + patch.corrupted_tokens[i]), "block \\ position");
    patch.scores.forEach((scores, l) => {
      const row = table.insertRow();
      row.appendChild(el("th", "", patch.rows[l]));
      scores.forEach((v, t) => {
        const cell = row.insertCell();
        cell.className = "patch-cell"; cell.style.background = heat(v); cell.textContent = v.toFixed(2);
        cell.dataset.layer = l; cell.dataset.pos = t; cell.dataset.score = v;
      });
    });
    body.append(table, el("div", "note", "metric: " + patch.metric + " (clean " + patch.clean.toFixed(3) + ", corrupted " + patch.corrupted.toFixed(3) + "); 1 (blue): patching that cell brings the clean run back, 0: nothing, red: the other way"));
  }

  const DRAW = { lens: drawLens, attribution: drawAttribution, patching: drawPatching };
  window.attnkitInterpret = {
    draw(view, root, data) {
      const now = [data.input.text, data.input.snapshot === undefined ? null : data.input.snapshot];
      if (!shown || now[0] !== shown[0] || now[1] !== shown[1]) { answers.clear(); off.clear(); shown = now; text = now[0]; }
      const redraw = () => { if (!root.hidden && text === data.input.text) DRAW[view](root, redraw); };
      DRAW[view](root, redraw);
    },
    snapshot(index) { return index >= 0 && index < steps.length ? steps[index] : null; },  // a slider index's step
    timeline(state, data, ask) {  // the slider over a run's weight snapshots; the last place: the trained weights
      steps = (data.model.snapshots || []).map((s) => s.step);
      const label = document.getElementById("timeline"), slider = document.getElementById("snapshot");
      label.hidden = steps.length === 0;
      if (!steps.length) return;
      if (state.snapshot >= steps.length) state.snapshot = -1;
      slider.max = String(steps.length);
      slider.value = String(state.snapshot < 0 ? steps.length : state.snapshot);
      const entry = data.model.snapshots[state.snapshot];
      document.getElementById("snapshot-value").textContent = state.snapshot < 0 ? "trained" :
        steps[state.snapshot] + (entry.loss === null ? "" : " (loss " + entry.loss.toFixed(3) + ")");
      slider.oninput = () => { const v = Number(slider.value); state.snapshot = v >= steps.length ? -1 : v; ask(); };
      if ((data.input.snapshot === undefined ? null : data.input.snapshot) !== this.snapshot(state.snapshot)) ask();
    },
  };
})();
