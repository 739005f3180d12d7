// The interactive memory report: reads the plan from the page's JSON and draws it.
// No network, no libraries: one canvas for the storages, one on top for hover and selection.
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("plan-data").textContent);
  const storages = data.storages;
  const byId = new Map(storages.map((s) => [s.id, s]));
  const TABLE_ROWS = 500;   // rows of the storage table drawn at once
  const TIP_VALUES = 12;    // values a tooltip lists before "+N more"
  const MARGIN = { left: 80, right: 14, top: 14, bottom: 38 };
  const PANEL_TITLE = 20;   // pixels above a bank's axis for its name and figures
  const PANEL_GAP = 10;     // pixels between two banks' axes
  const timings = {};
  const state = { hover: null, selected: null, sort: { key: "size", descending: true },
                  filter: "", drag: null };

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  function humanBytes(n) {
    if (Math.abs(n) < 1024) return n + " B";
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let value = n;
    let unit = units[0];
    for (unit of units) {
      value /= 1024;
      if (Math.abs(value) < 1024) break;
    }
    return value.toFixed(1) + " " + unit;
  }

  function exactBytes(n) { return n.toLocaleString("en-US") + " B"; }

  // As report/text.py's bytes_text: exact, and in binary units from 1 KiB.
  function bytesText(n) {
    return exactBytes(n) + (Math.abs(n) < 1024 ? "" : " (" + humanBytes(n) + ")");
  }

  // A value's shape and bytes at the current sizes of the dynamic dims: a dim that is a poly
  // in them as "seq=16", one known only at run time by its bound (sizes.py's dims).
  function dimText(d) {
    if (typeof d === "number") return String(d);
    return d.poly ? d.text + "=" + polyValue(d.poly) : "<=" + d.upper;
  }

  function shapeNow(v) { return v.dims ? "[" + v.dims.map(dimText).join(", ") + "]" : v.shape; }

  function bytesNow(v) { return v.bytes ? polyValue(v.bytes) : v.nbytes; }

  function valueLines(s, limit) {
    const shown = s.values.slice(0, limit).map((name) => {
      const v = data.values[name];
      if (!v) return el("div", { class: "value" }, [el("b", { text: name })]);
      return el("div", { class: "value" }, [
        el("b", { text: name }),
        " " + v.op + " · " + v.dtype + shapeNow(v) + " · dim_order (" + v.dim_order.join(", ") +
          ") · " + exactBytes(bytesNow(v)),
      ]);
    });
    if (s.values.length > limit) {
      shown.push(el("div", { class: "more", text: "+" + (s.values.length - limit) + " more" }));
    }
    return shown;
  }

  function lifetime(s) {
    return "[" + s.start + ", " + s.end + ")" + (s.graph ? " of " + s.graph : "");
  }

  // ---- the plan at the sizes of the dynamic dims ------------------------------------------
  // A symbolic plan's offsets and sizes are expressions in the dims (SizeExpr.to_json): the
  // largest of its terms, a term a poly ([[coefficient, {dim: power}], ...]) plus polys each
  // rounded up to a multiple. Plain numbers: exact while every value stays below 2**53.
  const symbolic = data.symbolic || null;
  const sizes = Object.assign({}, symbolic ? symbolic.at : {});

  function polyValue(poly) {
    let total = 0;
    for (const [coefficient, powers] of poly) {
      let product = coefficient;
      for (const [dim, power] of Object.entries(powers)) product *= sizes[dim] ** power;
      total += product;
    }
    return total;
  }

  // n rounded up to a multiple of k, in integers (as Python's -(-n // k) * k).
  function roundUp(n, k) {
    const below = ((n % k) + k) % k;
    return below === 0 ? n : n - below + k;
  }

  function exprValue(expr) {
    return Math.max(...expr.map((term) => term.aligned.reduce(
      (total, [poly, k]) => total + roundUp(polyValue(poly), k), polyValue(term.poly))));
  }

  // The top-level step with the most bytes live, each storage taking sizeOf(s) bytes and each
  // region its size (the first such step; as peak.py's peak): its bytes, storages largest
  // first, regions.
  function livePeak(sizeOf) {
    const top = storages.filter((s) => !s.graph);
    const regions = data.regions.filter((r) => !r.graph);
    const delta = new Array(data.x[1] + 1).fill(0);
    for (const s of top) {
      const bytes = sizeOf(s);
      delta[s.start] += bytes;
      delta[s.end] -= bytes;
    }
    for (const r of regions) { delta[r.step] += r.size; delta[r.step + 1] -= r.size; }
    let live = 0;
    let best = -1;
    let step = 0;
    delta.slice(0, -1).forEach((change, t) => {
      live += change;
      if (live > best) { best = live; step = t; }
    });
    return { step: step, bytes: Math.max(best, 0),
             storages: top.filter((s) => s.start <= step && step < s.end)
               .sort((a, b) => b.size - a.size || a.id - b.id).map((s) => s.id),
             regions: regions.filter((r) => r.step === step).map((r) => r.node) };
  }

  // Every offset and size, the arena, the lower bound and the peak at the current sizes; the
  // bytes axis shows the whole arena again.
  function applySizes() {
    for (const s of storages) {
      s.offset = exprValue(s.expr.offset);
      s.size = exprValue(s.expr.size);
    }
    for (const r of data.regions) r.offset = exprValue(r.expr.offset);
    data.arena = exprValue(symbolic.arena);
    data.lower_bound = livePeak((s) => roundUp(exprValue(s.expr.need), symbolic.alignment)).bytes;
    data.peak = livePeak((s) => s.size);
    resetPanels();
  }

  function setSize(name, value) {
    sizes[name] = value;
    $("dim-" + name + "-value").textContent = String(value);
    applySizes();
    drawSummary();
    drawLegend();
    drawPeak();
    drawSelected();
    drawTableBody();
    schedule();
  }

  // One slider per dim, above the summary (none for a static plan).
  function drawDims() {
    if (!symbolic) return;
    const controls = symbolic.dims.map((d) => {
      const input = el("input", { type: "range", id: "dim-" + d.name, min: d.lower,
                                  max: d.upper, step: 1, value: sizes[d.name] });
      input.addEventListener("input", () => setSize(d.name, Number(input.value)));
      return el("label", { class: "dim" }, [
        el("b", { text: d.name }), " = ",
        el("output", { id: "dim-" + d.name + "-value", text: String(sizes[d.name]) }), input,
        el("span", { class: "more", text: "from " + d.lower + " to " + d.upper }),
      ]);
    });
    $("summary").before(el("div", { id: "dims" }, [
      el("span", { text: "Plan at the sizes of the dynamic dims:" }), ...controls]));
  }

  // ---- summary, legend, peak ------------------------------------------------------------
  // As report/figures.py's bound_ratio, at the current sizes.
  function ratioText() {
    if (data.lower_bound === 0) return "n/a (nothing to place)";
    return (data.arena / data.lower_bound).toFixed(3) + " (arena / lower bound)";
  }

  // Away from the bounds the planner proved nothing; an arena at the lower bound is optimal all
  // the same (the same text as the command line's, report/figures.py).
  function optimalText() {
    return data.arena <= data.lower_bound ? "yes (the arena is the lower bound)"
                                          : "not proven at these sizes";
  }

  function term(label, children) {
    const meaning = data.glossary[label];
    return el("span", meaning ? { class: "term", title: label + ": " + meaning } : {}, children);
  }

  // The summary's rows; with dynamic dims, those that change with the sizes at the current ones.
  function summaryRows() {
    if (!symbolic) return data.summary;
    const atBounds = symbolic.dims.every((d) => sizes[d.name] === d.upper);
    const current = new Map([["arena", bytesText(data.arena)],
                             ["lower bound", bytesText(data.lower_bound)],
                             ["ratio", ratioText()], ["peak step", String(data.peak.step)]]);
    if (!atBounds) current.set("optimal", optimalText());
    const shown = symbolic.dims.map((d) => d.name + " = " + sizes[d.name]).join(", ");
    return [["sizes", shown],
            ...data.summary.map(([label, text]) => [label, current.get(label) ?? text])];
  }

  function drawSummary() {
    $("summary").replaceChildren(...summaryRows().map(([label, text]) =>
      el("div", { class: "number", "data-term": label, title: data.glossary[label] || "" },
         [el("span", { text: label }), el("b", { text: text })])));
  }

  // What each term means, once, under the chart (the summary's tooltips say the same).
  function drawGlossary() {
    const entries = Object.entries(data.glossary).flatMap(([label, meaning]) =>
      [el("dt", { text: label }), el("dd", { text: meaning })]);
    $("glossary").replaceChildren(el("h2", { text: "Glossary" }), el("dl", {}, entries));
  }

  // A mark per rewrite above the summary: patched (the split and the grid), chunked.
  function drawMarks() {
    $("marks").replaceChildren(...data.marks.map((mark) =>
      el("span", { class: "mark", "data-label": mark.label,
                   title: mark.label + ": " + data.glossary[mark.label] },
         [el("b", { text: mark.label }), " " + mark.summary])));
  }

  // The steps between the placeholders and the chart's first: nodes that make no value of the
  // arena (views, values of the weights).
  function quietSteps() {
    const first = data.placeholders, last = data.x[0] - 1;
    if (last < first) return "";
    return (last === first ? "; step " + first + " makes" : "; steps " + first + " to " + last +
            " make") + " no value of the arena (views, values of the weights)";
  }

  function drawSteps() {
    const text = data.instance
      ? "Steps are the instance's time: a buffer is live over [lower, upper)."
      : data.placeholders
        ? "Steps 0 to " + (data.placeholders - 1) + " are the program's " + data.placeholders +
          " placeholders (inputs, weights, buffers): nothing runs there" + quietSteps() +
          ", so the chart starts at step " + data.x[0] + "."
        : "";
    $("steps").textContent = text;
  }

  // With banks: each bank's capacity, arena, bound, traffic and cost (report/banks.py's rows).
  function drawBankTable() {
    if (!data.bank_table) return;
    const t = data.bank_table;
    const head = el("tr", {}, t.columns.map((c) =>
      el("th", { text: c, title: data.glossary[c] || "" })));
    const rows = t.rows.map((row) => el("tr", { "data-bank": row[0] },
                                        row.map((text) => el("td", { text: text }))));
    $("banks").replaceChildren(el("h2", { text: "Memory banks" }),
                               el("p", { id: "bank-title", text: t.title }),
                               el("table", { class: "small", id: "bank-table" },
                                  [el("thead", {}, [head]), el("tbody", {}, rows)]));
  }

  function drawLegend() {
    const items = Object.entries(data.kinds).map(([, kind]) =>
      el("span", { class: "key" }, [el("i", { style: "background:" + kind.colour }),
                                    kind.meaning]));
    if (data.regions.length) {
      items.push(el("span", { class: "key" }, [el("i", { class: "region" }),
                                               "control-flow region (its subgraphs inside)"]));
    }
    items.push(el("span", { class: "key" }, [el("i", { class: "bound" }), data.banks.length
      ? "each bank's lower bound (dotted: its capacity, when the axis reaches it)"
      : "lower bound " + humanBytes(data.lower_bound)]));
    items.push(el("span", { class: "key" }, [el("i", { class: "peak" }),
                                             "peak step " + data.peak.step]));
    for (const mark of data.marks.filter((m) => m.spans.length)) {
      items.push(el("span", { class: "key", "data-label": mark.label },
                    [el("i", { style: "background:" + data.rewrite_colour }),
                     mark.label + ": where its " + mark.spans.length + " regions run (the strip " +
                     "along the top)"]));
    }
    $("legend").replaceChildren(...items);
  }

  function storageRows(ids, limit) {
    const rows = ids.slice(0, limit).map((id) => {
      const s = byId.get(id);
      const row = el("tr", { "data-id": id }, [
        el("td", { text: String(id) }), el("td", { text: exactBytes(s.size) }),
        el("td", { class: "names", text: s.values.join(", ") }),
      ]);
      row.addEventListener("click", () => select(id));
      return row;
    });
    return rows;
  }

  function drawPeak() {
    const peak = data.peak;
    const head = el("p", {}, [
      "Step " + peak.step + ": " + exactBytes(peak.bytes) + " live (" + humanBytes(peak.bytes) +
        "), the lower bound " + exactBytes(data.lower_bound) +
        (peak.regions.length ? "; regions " + peak.regions.join(", ") : "") + ".",
    ]);
    const table = el("table", { class: "small" }, [
      el("thead", {}, [el("tr", {}, [el("th", { text: data.instance ? "buffer" : "storage" }),
                                    el("th", { text: "size" }),
                                    el("th", { text: "values" })])]),
      el("tbody", {}, storageRows(peak.storages, 100)),
    ]);
    const more = peak.storages.length > 100
      ? [el("p", { class: "more", text: "+" + (peak.storages.length - 100) + " more" })] : [];
    $("peak").replaceChildren(el("h2", { text: "Live at the peak, largest first" }), head, table,
                              ...more);
  }

  function drawSelected() {
    const s = state.selected === null ? null : byId.get(state.selected);
    if (!s) {
      $("selected").replaceChildren(el("h2", { text: data.instance ? "Selected buffer"
                                                                   : "Selected storage" }),
                                    el("p", { class: "more", text: "Click a rectangle or a row." }));
      return;
    }
    $("selected").replaceChildren(
      el("h2", { text: data.instance ? "Buffer " + s.values[0] : "Storage " + s.id + " (" +
                 s.kind + "): " + (s.values.length === 1 ? "1 value uses it"
                                                          : s.values.length + " values share it") }),
      el("p", { text: "offset " + exactBytes(s.offset) + ", size " + exactBytes(s.size) +
                      ", steps " + lifetime(s) }),
      ...valueLines(s, s.values.length));
  }

  // ---- the chart --------------------------------------------------------------------------
  // One panel (an axis of its own) per memory bank, fastest at the top, or one for the arena.
  // The steps are shared; each panel has its own bytes, bound and capacity. Offsets are within
  // a storage's bank.
  const base = $("base");
  const over = $("over");
  const tip = $("tip");
  const panels = (data.banks.length ? data.banks : [null]).map((b) => ({
    bank: b ? b.name : "", info: b, y0: 0, y1: 1, top: 0, height: 0 }));
  const panelOf = new Map(panels.map((p) => [p.bank, p]));
  const fullX = { x0: data.x[0], x1: data.x[1] };
  let view = Object.assign({}, fullX);
  let box = { width: 0, height: 0 };

  function arenaOf(p) { return p.info ? p.info.arena : data.arena; }
  function boundOf(p) { return p.info ? p.info.lower_bound : data.lower_bound; }
  function yExtent(p) {  // the inputs' own buffer (data.input_bytes) sits above the arena
    return Math.max(arenaOf(p) + (p.info ? 0 : data.input_bytes), boundOf(p), 1) * 1.08;
  }

  function resetPanels() {
    for (const p of panels) { p.y0 = 0; p.y1 = yExtent(p); }
  }

  function layoutPanels() {
    const title = data.banks.length ? PANEL_TITLE : 0;
    const slot = (box.height - MARGIN.top - MARGIN.bottom + PANEL_GAP) / panels.length;
    panels.forEach((p, i) => {
      p.top = MARGIN.top + i * slot + title;
      p.height = Math.max(slot - title - PANEL_GAP, 10);
    });
  }

  function plotWidth() { return box.width - MARGIN.left - MARGIN.right; }
  function plotBottom() { return box.height - MARGIN.bottom; }
  function sx(x) { return MARGIN.left + (x - view.x0) / (view.x1 - view.x0) * plotWidth(); }
  function sy(y, p) { return p.top + (1 - (y - p.y0) / (p.y1 - p.y0)) * p.height; }
  function dataX(px) { return view.x0 + (px - MARGIN.left) / plotWidth() * (view.x1 - view.x0); }
  function dataY(py, p) { return p.y0 + (1 - (py - p.top) / p.height) * (p.y1 - p.y0); }
  function panelAt(py) {
    return panels.find((p) => p.top <= py && py < p.top + p.height) || null;
  }

  function resize() {
    const ratio = window.devicePixelRatio || 1;
    box = { width: base.clientWidth, height: base.clientHeight };
    for (const canvas of [base, over]) {
      canvas.width = Math.round(box.width * ratio);
      canvas.height = Math.round(box.height * ratio);
      canvas.getContext("2d").setTransform(ratio, 0, 0, ratio, 0, 0);
    }
    layoutPanels();
    drawChart();
    drawOverlay();
  }

  function niceStep(span, count, powers) {
    const raw = span / count;
    if (powers) return Math.pow(2, Math.max(0, Math.ceil(Math.log2(raw))));
    const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const f of [1, 2, 5, 10]) if (f * magnitude >= raw) return Math.max(1, f * magnitude);
    return 10 * magnitude;
  }

  function textStyle(ctx) {
    ctx.strokeStyle = "#333";
    ctx.fillStyle = "#333";
    ctx.lineWidth = 1;
    ctx.setLineDash([]);
    ctx.font = "12px sans-serif";
  }

  // The steps under the lowest panel, once.
  function drawStepAxis(ctx) {
    textStyle(ctx);
    const xStep = niceStep(view.x1 - view.x0, 10, false);
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let x = Math.ceil(view.x0 / xStep) * xStep; x <= view.x1; x += xStep) {
      ctx.fillText(String(x), sx(x), plotBottom() + 4);
    }
    ctx.fillText(data.instance ? "step" : "step (top-level schedule)",
                 MARGIN.left + plotWidth() / 2, box.height - 16);
  }

  // A panel's frame, its bytes and, with banks, its bank's name and figures above it.
  function drawPanelAxes(ctx, p) {
    textStyle(ctx);
    ctx.strokeRect(MARGIN.left, p.top, plotWidth(), p.height);
    const yStep = niceStep(p.y1 - p.y0, Math.max(2, Math.round(p.height / 45)), true);
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let y = Math.ceil(p.y0 / yStep) * yStep; y <= p.y1; y += yStep) {
      ctx.fillText(humanBytes(y), MARGIN.left - 6, sy(y, p));
    }
    if (!p.info) return;
    ctx.textAlign = "left";
    ctx.textBaseline = "bottom";
    ctx.font = "bold 12px sans-serif";
    ctx.fillText("bank " + p.bank + ": arena " + humanBytes(p.info.arena) + ", capacity " +
                 (p.info.capacity === null ? "unbounded" : humanBytes(p.info.capacity)) +
                 ", lower bound " + humanBytes(p.info.lower_bound) + "; traffic " +
                 humanBytes(p.info.traffic) + " per run, cost " + p.info.cost,
                 MARGIN.left, p.top - 3);
  }

  // Clear the canvas.
  function startPlot(ctx) { ctx.clearRect(0, 0, box.width, box.height); }

  // Clip drawing to a panel (until ctx.restore()).
  function clipTo(ctx, p) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(MARGIN.left, p.top, plotWidth(), p.height);
    ctx.clip();
  }

  function horizontal(ctx, y, p, dash) {
    ctx.setLineDash(dash);
    ctx.beginPath();
    ctx.moveTo(MARGIN.left, sy(y, p));
    ctx.lineTo(MARGIN.left + plotWidth(), sy(y, p));
    ctx.stroke();
  }

  function drawStorages(ctx, p) {
    const mine = storages.filter((s) => s.bank === p.bank);
    for (const [name, kind] of Object.entries(data.kinds)) {
      ctx.fillStyle = kind.colour;
      ctx.beginPath();
      for (const s of mine) {
        if (s.kind !== name) continue;
        const left = sx(s.x0);
        const top = sy(s.offset + s.size, p);
        ctx.rect(left, top, Math.max(sx(s.x1) - left, 0.5), Math.max(sy(s.offset, p) - top, 0.5));
      }
      ctx.fill();
    }
    ctx.strokeStyle = "rgba(20, 20, 20, 0.55)";
    ctx.lineWidth = 0.5;
    ctx.beginPath();
    for (const s of mine) {
      const left = sx(s.x0);
      const top = sy(s.offset + s.size, p);
      const width = sx(s.x1) - left;
      const height = sy(s.offset, p) - top;
      if (width > 4 && height > 4) ctx.rect(left, top, width, height);
    }
    ctx.stroke();
  }

  // Where each rewrite runs (a chunked program: each region's steps), a strip along the top of
  // a panel, neighbours in two lanes so that regions that overlap in time stay apart.
  function drawSpansOn(ctx, p) {
    const lane = 5;
    ctx.fillStyle = data.rewrite_colour;
    for (const mark of data.marks) {
      mark.spans.forEach(([start, end], i) => {
        ctx.fillRect(sx(start), p.top + (i % 2) * lane, Math.max(sx(end) - sx(start), 1),
                     lane - 1);
      });
    }
  }

  // The peak band, the regions, the spans of the rewrites, the bound (dashed) and the capacity
  // (dotted) of a panel.
  function drawMarksOn(ctx, p) {
    const peakLeft = sx(data.peak.step);
    const peakWidth = Math.max(sx(data.peak.step + 1) - peakLeft, 1);
    ctx.fillStyle = data.peak_colour + "40";
    ctx.fillRect(peakLeft, p.top, peakWidth, p.height);
    ctx.strokeStyle = data.peak_colour;
    ctx.lineWidth = 1;
    ctx.strokeRect(peakLeft, p.top, peakWidth, p.height);
    ctx.strokeStyle = data.region_colour;
    ctx.setLineDash([4, 3]);
    ctx.lineWidth = 1.5;
    for (const r of data.regions) {
      if (r.bank !== p.bank) continue;
      ctx.strokeRect(sx(r.x0), sy(r.offset + r.size, p), sx(r.x1) - sx(r.x0),
                     sy(r.offset, p) - sy(r.offset + r.size, p));
    }
    drawSpansOn(ctx, p);
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 1;
    horizontal(ctx, boundOf(p), p, [6, 4]);
    if (p.info && p.info.capacity !== null) horizontal(ctx, p.info.capacity, p, [2, 3]);
  }

  function drawChart() {
    const started = performance.now();
    const ctx = base.getContext("2d");
    startPlot(ctx);
    for (const p of panels) {
      clipTo(ctx, p);
      drawStorages(ctx, p);
      drawMarksOn(ctx, p);
      ctx.restore();
      drawPanelAxes(ctx, p);
    }
    drawStepAxis(ctx);
    timings.draw = performance.now() - started;
  }

  function outline(ctx, s, colour, width) {
    const p = panelOf.get(s.bank);
    ctx.strokeStyle = colour;
    ctx.lineWidth = width;
    const left = sx(s.x0);
    const top = sy(s.offset + s.size, p);
    ctx.strokeRect(left, top, Math.max(sx(s.x1) - left, 1), Math.max(sy(s.offset, p) - top, 1));
  }

  function drawOverlay() {
    const ctx = over.getContext("2d");
    startPlot(ctx);
    const selected = state.selected === null ? null : byId.get(state.selected);
    for (const p of panels) {
      clipTo(ctx, p);
      if (selected) {
        ctx.fillStyle = "rgba(255, 255, 255, 0.45)";
        ctx.fillRect(0, 0, box.width, box.height);
      }
      if (selected && selected.bank === p.bank) {
        ctx.fillStyle = data.kinds[selected.kind].colour;
        const left = sx(selected.x0);
        const top = sy(selected.offset + selected.size, p);
        ctx.fillRect(left, top, Math.max(sx(selected.x1) - left, 1),
                     Math.max(sy(selected.offset, p) - top, 1));
        outline(ctx, selected, "#000", 3);
      }
      const hovered = state.hover === null ? null : byId.get(state.hover);
      if (hovered && hovered.bank === p.bank) outline(ctx, hovered, "#ff8c00", 2);
      ctx.restore();
    }
  }

  function storageAt(px, py) {
    const p = panelAt(py);
    if (!p) return null;
    const x = dataX(px);
    const y = dataY(py, p);
    for (let i = storages.length - 1; i >= 0; --i) {
      const s = storages[i];
      if (s.bank === p.bank && s.x0 <= x && x < s.x1 && s.offset <= y && y < s.offset + s.size) {
        return s;
      }
    }
    return null;
  }

  function regionAt(px, py) {
    const p = panelAt(py);
    if (!p) return null;
    const x = dataX(px);
    const y = dataY(py, p);
    return data.regions.find((r) => r.bank === p.bank && r.x0 <= x && x < r.x1 &&
                                    r.offset <= y && y < r.offset + r.size) || null;
  }

  function showTip(event, children) {
    tip.replaceChildren(...children);
    tip.hidden = false;
    const bounds = over.getBoundingClientRect();
    const x = event.clientX - bounds.left + 14;
    const y = event.clientY - bounds.top + 14;
    tip.style.left = Math.min(x, box.width - tip.offsetWidth - 4) + "px";
    tip.style.top = (y + tip.offsetHeight > box.height ? y - tip.offsetHeight - 20 : y) + "px";
  }

  function storageTip(s) {
    const head = data.instance ? "buffer " + s.values[0]
      : "storage " + s.id + " · " + s.kind + (s.bank ? " · bank " + s.bank : "");
    return [
      el("div", { class: "tip-head", text: head }),
      el("div", { text: "offset " + exactBytes(s.offset) + " · size " + exactBytes(s.size) +
                        " (" + humanBytes(s.size) + ")" }),
      el("div", { text: "lifetime: steps " + lifetime(s) }),
      ...(data.instance ? [] : valueLines(s, TIP_VALUES)),
    ];
  }

  function pan(px, py) {
    const drag = state.drag;
    const dx = (px - drag.px) / plotWidth() * (drag.view.x1 - drag.view.x0);
    view = { x0: drag.view.x0 - dx, x1: drag.view.x1 - dx };
    if (drag.panel) {
      const p = drag.panel;
      const dy = (py - drag.py) / p.height * (drag.y1 - drag.y0);
      p.y0 = drag.y0 + dy;
      p.y1 = drag.y1 + dy;
    }
    drag.moved = true;
    schedule();
  }

  function hover(event) {
    const bounds = over.getBoundingClientRect();
    const px = event.clientX - bounds.left;
    const py = event.clientY - bounds.top;
    if (state.drag) {
      pan(px, py);
      return;
    }
    const s = storageAt(px, py);
    state.hover = s ? s.id : null;
    if (s) {
      showTip(event, storageTip(s));
    } else {
      const r = regionAt(px, py);
      if (r) {
        showTip(event, [el("div", { class: "tip-head", text: "region of " + r.node }),
                        el("div", { text: "offset " + exactBytes(r.offset) + " · size " +
                                          exactBytes(r.size) + " · step " + r.step }),
                        el("div", { text: "subgraphs: " + r.subgraphs.join(", ") })]);
      } else {
        tip.hidden = true;
      }
    }
    drawOverlay();
  }

  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; drawChart(); drawOverlay(); });
  }

  function zoom(event) {
    event.preventDefault();
    const bounds = over.getBoundingClientRect();
    const factor = event.deltaY < 0 ? 0.8 : 1.25;
    const p = panelAt(event.clientY - bounds.top);
    if (event.shiftKey) {
      if (!p) return;
      const y = dataY(event.clientY - bounds.top, p);
      p.y0 = Math.max(0, y - (y - p.y0) * factor);
      p.y1 = y + (p.y1 - y) * factor;
    } else {
      const x = dataX(event.clientX - bounds.left);
      view.x0 = x - (x - view.x0) * factor;
      view.x1 = x + (view.x1 - x) * factor;
    }
    schedule();
  }

  function select(id) {
    state.selected = id;
    drawOverlay();
    drawSelected();
    for (const row of document.querySelectorAll("tr.chosen")) row.classList.remove("chosen");
    if (id === null) return;
    for (const row of document.querySelectorAll('tr[data-id="' + id + '"]')) {
      row.classList.add("chosen");
    }
    const listed = $("storage-rows").querySelector('tr[data-id="' + id + '"]');
    const wrap = $("table-wrap");
    if (listed) wrap.scrollTop = Math.max(0, listed.offsetTop - wrap.clientHeight / 2);
  }

  // ---- the storage table ------------------------------------------------------------------
  // A DSA instance's buffers have no kind and no graph; only banked plans have a bank column.
  const COLUMNS = [
    { key: "id", label: "id", value: (s) => s.id },
    { key: "values", label: data.instance ? "buffer" : "values", value: (s) => s.values.join(", ") },
    ...(data.instance ? [] : [{ key: "kind", label: "kind", value: (s) => s.kind }]),
    { key: "offset", label: "offset", value: (s) => s.offset },
    { key: "size", label: "size", value: (s) => s.size },
    { key: "start", label: "start", value: (s) => s.start },
    { key: "end", label: "end", value: (s) => s.end },
    { key: "lifetime", label: "lifetime (steps)", value: (s) => s.end - s.start },
    ...(data.instance ? [] : [{ key: "graph", label: "graph",
                                value: (s) => s.graph || "(top level)" }]),
    ...(data.banks.length ? [{ key: "bank", label: "bank", value: (s) => s.bank }] : []),
  ];

  function drawTableHead() {
    const cells = COLUMNS.map((column) => {
      const sorted = state.sort.key === column.key;
      const th = el("th", {
        "data-key": column.key,
        "aria-sort": sorted ? (state.sort.descending ? "descending" : "ascending") : "none",
        text: column.label + (sorted ? (state.sort.descending ? " ▼" : " ▲") : ""),
      });
      th.addEventListener("click", () => {
        state.sort = { key: column.key,
                       descending: sorted ? !state.sort.descending : column.key !== "id" };
        drawTableHead();
        drawTableBody();
      });
      return th;
    });
    $("storage-head").replaceChildren(el("tr", {}, cells));
  }

  function drawTableBody() {
    const started = performance.now();
    const column = COLUMNS.find((c) => c.key === state.sort.key);
    const needle = state.filter.toLowerCase();
    const matching = needle
      ? storages.filter((s) => s.values.some((name) => name.toLowerCase().includes(needle)))
      : storages.slice();
    const sign = state.sort.descending ? -1 : 1;
    matching.sort((a, b) => {
      const va = column.value(a);
      const vb = column.value(b);
      return (va < vb ? -1 : va > vb ? 1 : a.id - b.id) * sign;
    });
    const rows = matching.slice(0, TABLE_ROWS).map((s) => {
      const row = el("tr", { "data-id": s.id, class: s.id === state.selected ? "chosen" : "" },
        COLUMNS.map((c) => {
          const value = c.value(s);
          const bytes = c.key === "offset" || c.key === "size";
          return el("td", { class: c.key === "values" ? "names" : "",
                            text: bytes ? exactBytes(value) : String(value) });
        }));
      row.addEventListener("click", () => select(s.id));
      return row;
    });
    $("storage-rows").replaceChildren(...rows);
    $("table-note").textContent = "showing " + rows.length.toLocaleString("en-US") + " of " +
      matching.length.toLocaleString("en-US") + " matching storages (" +
      storages.length.toLocaleString("en-US") + " in all)" +
      (matching.length > TABLE_ROWS ? "; filter or sort to see the others" : "");
    timings.table = performance.now() - started;
  }

  // ---- wiring -----------------------------------------------------------------------------
  over.addEventListener("mousemove", hover);
  over.addEventListener("mouseleave", () => {
    state.hover = null;
    state.drag = null;
    tip.hidden = true;
    drawOverlay();
  });
  over.addEventListener("mousedown", (event) => {
    const bounds = over.getBoundingClientRect();
    const py = event.clientY - bounds.top;
    const panel = panelAt(py);
    state.drag = { px: event.clientX - bounds.left, py: py, view: Object.assign({}, view),
                   panel: panel, y0: panel ? panel.y0 : 0, y1: panel ? panel.y1 : 0,
                   moved: false };
  });
  over.addEventListener("mouseup", (event) => {
    const moved = state.drag && state.drag.moved;
    state.drag = null;
    if (moved) return;
    const bounds = over.getBoundingClientRect();
    const s = storageAt(event.clientX - bounds.left, event.clientY - bounds.top);
    select(s ? s.id : null);
  });
  over.addEventListener("wheel", zoom, { passive: false });
  over.addEventListener("dblclick", () => {
    view = Object.assign({}, fullX);
    resetPanels();
    schedule();
  });
  $("filter").addEventListener("input", (event) => {
    state.filter = event.target.value;
    drawTableBody();
  });
  new ResizeObserver(resize).observe(base);

  const started = performance.now();
  resetPanels();
  if (symbolic) applySizes();
  drawDims();
  drawMarks();
  drawSummary();
  drawLegend();
  drawPeak();
  drawSelected();
  drawSteps();
  drawBankTable();
  drawGlossary();
  drawTableHead();
  drawTableBody();
  resize();
  timings.page = performance.now() - started;

  // For scripts and tests: where a storage is drawn (CSS pixels from the canvas's top left).
  window.tensorplanReport = {
    data: data,
    timings: timings,
    select: select,
    pointOf: function (id) {
      const s = byId.get(id);
      const p = panelOf.get(s.bank);
      return [(sx(s.x0) + sx(s.x1)) / 2, (sy(s.offset, p) + sy(s.offset + s.size, p)) / 2];
    },
    // Each panel's bank and its top and bottom (CSS pixels), and its bytes' range.
    panels: function () {
      return panels.map((p) => ({ bank: p.bank, top: p.top, bottom: p.top + p.height,
                                  y0: p.y0, y1: p.y1 }));
    },
  };
})();
