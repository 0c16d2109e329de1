/* pytest-roofline report: draws inline SVG charts from the embedded JSON, sorts tables and
   recomputes the what-if latency.  Vanilla JS, no library, no network.  Text from the data is
   only ever set with textContent, never parsed as HTML. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("roofline-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                 "#b07aa1", "#ff9da7", "#9c755f", "#17becf", "#8c564b"];
  var OTHER = "#bab0ac";
  var ROOF_COLOURS = ["#1d2330", "#6a3d9a", "#b15928", "#33a02c"];
  var tip = document.getElementById("tip");
  var byId = {};
  DATA.results.forEach(function (r) { byId[r.id] = r; });

  function el(tag, attrs, parent, text) {
    var node = document.createElementNS(NS, tag);
    for (var k in attrs) { if (attrs[k] !== undefined && attrs[k] !== null) node.setAttribute(k, attrs[k]); }
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function si(v, unit) {
    if (v === null || v === undefined || !isFinite(v)) return "\u2013";
    var a = Math.abs(v), p = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < p.length; i++) { if (a >= p[i][0]) return +(v / p[i][0]).toPrecision(3) + " " + p[i][1] + unit; }
    return +v.toPrecision(3) + " " + unit;
  }
  function secs(v) {
    if (v === null || v === undefined || !isFinite(v)) return "\u2013";
    var a = Math.abs(v);
    if (a >= 1) return +v.toPrecision(3) + " s";
    if (a >= 1e-3) return +(v * 1e3).toPrecision(3) + " ms";
    if (a >= 1e-6) return +(v * 1e6).toPrecision(3) + " \u00b5s";
    return v ? +(v * 1e9).toPrecision(3) + " ns" : "0 s";
  }
  function pct(v) { return v === null || v === undefined ? "\u2013" : (100 * v).toFixed(1) + "%"; }
  function log10(v) { return Math.log(v) / Math.LN10; }

  /* A plot area with axes; returns scales.  opts: w h xdom ydom xlog ylog xlabel ylabel xfmt yfmt xticks bottom */
  function frame(container, opts) {
    var m = {l: 92, r: 20 + (opts.right || 0), t: 14, b: 46 + (opts.bottom || 0)};
    var svg = el("svg", {width: opts.w, height: opts.h, viewBox: "0 0 " + opts.w + " " + opts.h, role: "img"});
    container.appendChild(svg);
    var W = opts.w - m.l - m.r, H = opts.h - m.t - m.b;
    function scale(dom, log, a, b) {
      var lo = log ? log10(dom[0]) : dom[0], hi = log ? log10(dom[1]) : dom[1];
      return function (v) { var t = ((log ? log10(v) : v) - lo) / ((hi - lo) || 1); return a + t * (b - a); };
    }
    var x = scale(opts.xdom, opts.xlog, m.l, m.l + W), y = scale(opts.ydom, opts.ylog, m.t + H, m.t);
    function ticks(dom, log, given) {
      if (given) return given;
      var out = [];
      if (log) { for (var e = Math.ceil(log10(dom[0]) - 1e-9); e <= Math.floor(log10(dom[1]) + 1e-9); e++) out.push(Math.pow(10, e)); return out; }
      var step = Math.pow(10, Math.floor(log10((dom[1] - dom[0]) / 5 || 1))), span = dom[1] - dom[0];
      if (span / step > 10) step *= 2; if (span / step > 10) step *= 2.5;
      for (var v = Math.ceil(dom[0] / step) * step; v <= dom[1] + 1e-12; v += step) out.push(v);
      return out;
    }
    var g = el("g", {"class": "axis"}, svg);
    ticks(opts.ydom, opts.ylog).forEach(function (v) {
      el("line", {"class": "grid", x1: m.l, x2: m.l + W, y1: y(v), y2: y(v)}, g);
      el("text", {x: m.l - 6, y: y(v) + 4, "text-anchor": "end"}, g, opts.yfmt(v));
    });
    ticks(opts.xdom, opts.xlog, opts.xticks).forEach(function (v) {
      el("line", {"class": "grid", x1: x(v), x2: x(v), y1: m.t, y2: m.t + H}, g);
      el("text", {x: x(v), y: m.t + H + 16, "text-anchor": "middle"}, g, opts.xfmt(v));
    });
    el("rect", {x: m.l, y: m.t, width: W, height: H, fill: "none", stroke: "#8a93a3"}, g);
    el("text", {x: m.l + W / 2, y: m.t + H + 36, "text-anchor": "middle", "font-weight": 600}, g, opts.xlabel);
    el("text", {transform: "translate(14," + (m.t + H / 2) + ") rotate(-90)", "text-anchor": "middle", "font-weight": 600}, g, opts.ylabel);
    el("clipPath", {id: "clip-" + opts.id}, svg).appendChild(el("rect", {x: m.l, y: m.t, width: W, height: H}));
    return {svg: svg, x: x, y: y, m: m, W: W, H: H};
  }

  function showTip(evt, text, pinned) {
    tip.textContent = text;
    tip.hidden = false;
    tip.classList.toggle("pinned", !!pinned);
    var left = evt.pageX + 14, top = evt.pageY + 14;
    if (left + 390 > window.scrollX + document.documentElement.clientWidth) left = evt.pageX - 390;
    tip.style.left = left + "px"; tip.style.top = top + "px";
  }
  var pinned = null;
  function hideTip() { if (!pinned) tip.hidden = true; }

  function layerText(l) {
    var flops = l[6], bytes = l[7], time = l[4];
    var intensity = bytes ? flops / bytes : null;
    return l[0] + "\nop: " + l[1] + (l[3] && l[3] !== "compute" ? " (" + l[3] + ")" : "") +
      "\nONNX nodes: " + (l[2] || "\u2013") + "\ntime: " + secs(time) + " (" + pct(l[5]) + " of kernel time)" +
      "\nFLOPs: " + si(flops, "FLOP") + "   bytes: " + si(bytes, "B") +
      "\nintensity: " + (intensity === null ? "\u2013" : +intensity.toPrecision(3) + " FLOP/byte") +
      "\nachieved: " + si(time > 0 ? flops / time : 0, "FLOP/s") + "   " + si(time > 0 ? bytes / time : 0, "B/s") +
      "\nroofline fraction: " + pct(l[8]) + "   bound: " + (l[9] || "\u2013") +
      "\nmemory level: " + (l[10] || "\u2013");
  }

  /* Colour per op type of the drawn layers, most time first; the rest share one colour. */
  function colours(layers) {
    var time = {}, map = {}, legend = [];
    layers.forEach(function (l) { time[l[1]] = (time[l[1]] || 0) + l[4]; });
    var ops = Object.keys(time).sort(function (a, b) { return time[b] - time[a]; });
    ops.forEach(function (op, i) {
      if (i < PALETTE.length - 1 || ops.length === PALETTE.length) { map[op] = PALETTE[i]; legend.push([op, PALETTE[i]]); }
    });
    if (ops.length > legend.length) legend.push(["other", OTHER]);
    return {of: function (op) { return map[op] || OTHER; }, legend: legend};
  }

  function drawRoofline(container, result) {
    var roof = result.roof, layers = result.layers.filter(function (l) { return l[4] > 0; });
    var placed = [], strip = [];
    layers.forEach(function (l) { (l[6] > 0 ? placed : strip).push(l); });
    var xs = [], ys = [];
    placed.forEach(function (l) { xs.push(l[7] ? l[6] / l[7] : NaN); ys.push(l[6] / l[4]); });
    var peaks = roof ? Object.keys(roof.peaks).map(function (k) { return [k, roof.peaks[k]]; }) : [];
    peaks.sort(function (a, b) { return b[1] - a[1]; });
    var peakMax = peaks.length ? peaks[0][1] : null;
    var finiteX = xs.filter(function (v) { return isFinite(v) && v > 0; });
    var xlo = Math.min.apply(null, finiteX.concat(roof && roof.ridge ? [roof.ridge / 30] : []).concat([1]));
    var xhi = Math.max.apply(null, finiteX.concat(roof && roof.ridge ? [roof.ridge * 30] : []).concat([10]));
    var ylo = Math.min.apply(null, ys.map(function (v) { return v / 2; }).concat(peakMax ? [peakMax / 100] : [1e6]));
    var yhi = Math.max.apply(null, ys.concat(peakMax ? [peakMax] : []).concat([1e7]));
    var xdom = [Math.pow(10, Math.floor(log10(xlo))), Math.pow(10, Math.ceil(log10(xhi)))];
    var ydom = [Math.pow(10, Math.floor(log10(ylo))), Math.pow(10, Math.ceil(log10(yhi * 1.6)))];
    var stripH = strip.length ? 44 : 0;
    var w = Math.max(720, Math.min(1200, container.clientWidth || 900)), h = 470 + stripH;
    var f = frame(container, {id: result.id, w: w, h: h, xdom: xdom, ydom: ydom, xlog: true, ylog: true, bottom: stripH, right: 170,
      xlabel: "arithmetic intensity (FLOP/byte)", ylabel: "performance (FLOP/s)",
      xfmt: function (v) { return v >= 1000 ? si(v, "").replace(" ", "") : String(+v.toPrecision(3)); }, yfmt: function (v) { return si(v, "FLOP/s"); }});
    var svg = f.svg, x = f.x, y = f.y;
    var roofs = el("g", {"clip-path": "url(#clip-" + result.id + ")"}, svg);
    var labels = el("g", {"class": "roof-labels"}, svg);
    function memoryRoof(name, bw, colour, dashed, slot) {
      var xEnd = peakMax ? peakMax / bw : xdom[1];
      el("line", {"class": "roof memory", x1: x(xdom[0]), y1: y(xdom[0] * bw), x2: x(Math.min(xEnd, xdom[1])),
        y2: y(Math.min(xEnd, xdom[1]) * bw), stroke: colour, "stroke-dasharray": dashed ? "6 4" : null}, roofs);
      var lx = xdom[0] * Math.pow(xEnd / xdom[0], 0.12 + 0.14 * slot), ly = lx * bw;  // stagger labels
      if (ly > ydom[0] * 1.5) {
        var angle = Math.atan2(y(lx * 10) - y(lx), x(lx * 10) - x(lx)) * 180 / Math.PI;
        el("text", {x: x(lx), y: y(ly) - 6, fill: colour, transform: "rotate(" + angle + " " + x(lx) + " " + (y(ly) - 6) + ")"},
          labels, name + " " + si(bw, "B/s"));
      }
    }
    var levelColour = {DRAM: ROOF_COLOURS[0]};  // one roof line per memory level; a point's outline is its level's
    if (roof && roof.bw) {
      var caches = roof.caches.filter(function (c) { return c[0] !== "DRAM"; }).sort(function (a, b) { return b[1] - a[1]; });
      caches.forEach(function (c, i) {
        levelColour[c[0]] = ROOF_COLOURS[(i + 1) % ROOF_COLOURS.length];
        memoryRoof(c[0], c[1], levelColour[c[0]], true, (i + 1) % 4);
      });
      memoryRoof("DRAM", roof.bw, ROOF_COLOURS[0], false, 0);
      var lastLabel = -Infinity;  // peaks descend, so labels go down the chart; keep them 13px apart
      peaks.forEach(function (p, i) {
        var x0 = p[1] / roof.bw, main = p[0] === roof.dtype, colour = main ? ROOF_COLOURS[0] : "#6a3d9a";
        el("line", {"class": "roof compute", x1: x(Math.max(x0, xdom[0])), y1: y(p[1]), x2: x(xdom[1]), y2: y(p[1]),
          stroke: colour, "stroke-dasharray": main ? null : "6 4"}, roofs);
        var ly = y(p[1]) - 6;
        if (ly < lastLabel + 13) ly = Math.max(y(p[1]) + 14, lastLabel + 13);
        lastLabel = ly;
        el("text", {x: x(xdom[1]) - 6, y: ly, "text-anchor": "end", fill: colour}, labels, p[0] + " peak " + si(p[1], "FLOP/s"));
      });
      if (roof.ridge) {
        var peak = roof.peaks[roof.dtype] || peakMax;
        el("line", {x1: x(roof.ridge), x2: x(roof.ridge), y1: y(peak), y2: f.m.t + f.H, stroke: "#888", "stroke-dasharray": "2 3"}, roofs);
        el("circle", {"class": "ridge", cx: x(roof.ridge), cy: y(peak), r: 5, fill: "#fff", stroke: "#1d2330", "stroke-width": 2}, svg);
        el("text", {x: x(roof.ridge) + 5, y: f.m.t + f.H - 6}, labels, "ridge point " + +roof.ridge.toPrecision(3) + " FLOP/byte");
      }
      if (roof.floor) {  // the third roof: no kernel takes less, whatever its FLOPs and bytes
        var bound = layers.filter(function (l) { return l[9] === "overhead"; }).length;
        el("text", {"class": "floor", x: f.m.l + 6, y: f.m.t + 14}, labels,
          "dispatch floor " + secs(roof.floor) + " a kernel" + (bound ? " · " + bound + " layers overhead-bound" : ""));
      }
    }
    var col = colours(layers);
    var pts = el("g", {"class": "points"}, svg);
    function radius(l) { return 3 + 16 * Math.sqrt(Math.max(l[5], 0)); }
    function addPoint(l, cx, cy) {
      var c = el("circle", {"class": "pt", cx: cx, cy: cy, r: radius(l), fill: col.of(l[1]), "data-name": l[0],
        "data-level": l[10] || null, style: levelColour[l[10]] ? "stroke:" + levelColour[l[10]] : null}, pts);
      c.addEventListener("mouseenter", function (e) { if (!pinned) showTip(e, layerText(l)); });
      c.addEventListener("mouseleave", hideTip);
      c.addEventListener("click", function (e) {
        e.stopPropagation();
        var again = pinned === c;
        if (pinned) pinned.classList.remove("pinned");
        document.querySelectorAll("tr.pinned").forEach(function (r) { r.classList.remove("pinned"); });
        pinned = again ? null : c;
        if (again) { tip.hidden = true; return; }
        c.classList.add("pinned");
        showTip(e, layerText(l), true);
        var table = document.querySelector('table.layers[data-result="' + result.id + '"]');
        if (table) {
          table.querySelectorAll("tbody tr").forEach(function (r) {
            if (r.getAttribute("data-name") === l[0]) { r.classList.add("pinned"); r.classList.remove("hidden"); }
          });
        }
      });
    }
    var order = placed.slice().sort(function (a, b) { return b[5] - a[5]; });
    order.forEach(function (l) {
      var ix = l[7] ? l[6] / l[7] : xdom[1];
      addPoint(l, x(Math.min(Math.max(ix, xdom[0]), xdom[1])), y(Math.min(Math.max(l[6] / l[4], ydom[0]), ydom[1])));
    });
    if (strip.length) {
      var top = f.m.t + f.H + 50;
      el("text", {x: f.m.l - 6, y: top + 14, "text-anchor": "end"}, labels, "no FLOPs:");
      el("line", {x1: f.m.l, x2: f.m.l + f.W, y1: top + 10, y2: top + 10, stroke: "#eceff4"}, labels);
      strip.slice().sort(function (a, b) { return b[4] - a[4]; }).forEach(function (l, i) {
        addPoint(l, f.m.l + 10 + (f.W - 20) * (strip.length > 1 ? i / (strip.length - 1) : 0), top + 10);
      });
    }
    var lg = el("g", {"class": "legend"}, svg), lx = f.m.l + f.W + 14, ly = f.m.t + 12;
    el("text", {x: lx, y: ly, "font-weight": 600}, lg, "op type (size = time)");
    ly += 18;
    col.legend.forEach(function (item, i) {
      el("circle", {cx: lx + 5, cy: ly + i * 16 - 4, r: 5, fill: item[1], stroke: "#222", "stroke-width": 0.5}, lg);
      el("text", {x: lx + 14, y: ly + i * 16}, lg, item[0].length > 22 ? item[0].slice(0, 21) + "\u2026" : item[0]);
    });
    var used = {};  // the memory levels the points sit on, as their outlines show them
    layers.forEach(function (l) { if (l[10] && levelColour[l[10]]) used[l[10]] = true; });
    var names = Object.keys(levelColour).filter(function (n) { return used[n]; });
    if (names.length) {
      ly += col.legend.length * 16 + 10;
      el("text", {x: lx, y: ly, "font-weight": 600}, lg, "outline = memory level");
      names.forEach(function (n, i) {
        el("circle", {"class": "level-key", cx: lx + 5, cy: ly + 18 + i * 16 - 4, r: 5, fill: "#fff", stroke: levelColour[n], "stroke-width": 2}, lg);
        el("text", {x: lx + 14, y: ly + 18 + i * 16}, lg, n);
      });
    }
  }

  function lineChart(container, opts) {
    var pts = opts.points.filter(function (p) { return p[1] !== null && isFinite(p[1]); });
    if (!pts.length) return;
    var ys = pts.map(function (p) { return p[1]; }).concat(opts.extra || []);
    var lo = opts.zero ? 0 : Math.min.apply(null, ys) * 0.9, hi = Math.max.apply(null, ys) * 1.1;
    var f = frame(container, {id: opts.id, w: opts.w || 460, h: 300, xdom: opts.xdom, ydom: [lo, hi || 1], xlog: opts.xlog,
      xlabel: opts.xlabel, ylabel: opts.ylabel, xfmt: opts.xfmt, yfmt: opts.yfmt, xticks: opts.xticks, bottom: opts.bottom});
    if (opts.band) {
      var band = opts.band.map(function (b) { return f.x(b[0]) + "," + f.y(b[2]); }).concat(
        opts.band.slice().reverse().map(function (b) { return f.x(b[0]) + "," + f.y(b[1]); }));
      el("polygon", {points: band.join(" "), fill: "#4e79a7", "fill-opacity": 0.15}, f.svg);
    }
    el("polyline", {points: pts.map(function (p) { return f.x(p[0]) + "," + f.y(p[1]); }).join(" "), fill: "none",
      stroke: opts.colour || "#4e79a7", "stroke-width": 2}, f.svg);
    pts.forEach(function (p) {
      var c = el("circle", {cx: f.x(p[0]), cy: f.y(p[1]), r: 4, fill: p[3] || opts.colour || "#4e79a7", "class": "dot"}, f.svg);
      el("title", {}, c, p[2]);
    });
    return f;
  }

  function drawSweep(container, sweep, kind) {
    var b = sweep.points.map(function (p) { return p.batch; });
    var common = {id: "sw" + kind, w: 460, xdom: [Math.min.apply(null, b) / 1.3, Math.max.apply(null, b) * 1.3], xlog: true,
      xticks: b, xfmt: String, xlabel: "batch size", zero: true};
    if (kind === "latency") {
      lineChart(container, Object.assign(common, {ylabel: "median latency (s)", yfmt: secs,
        points: sweep.points.map(function (p) { return [p.batch, p.median, "batch " + p.batch + ": " + secs(p.median)]; }),
        band: sweep.points.map(function (p) { return [p.batch, p.p25, p.p75]; }),
        extra: sweep.points.map(function (p) { return p.p75; })}));
    } else {
      lineChart(container, Object.assign(common, {ylabel: "throughput (samples/s)", colour: "#59a14f",
        yfmt: function (v) { return si(v, "").trim(); },
        points: sweep.points.map(function (p) { return [p.batch, p.throughput, "batch " + p.batch + ": " + p.throughput.toPrecision(4) + " samples/s"]; })}));
    }
  }

  function drawHistory(container, result) {
    var hist = result.history.filter(function (h) { return h.median !== null; });
    var pts = hist.map(function (h, i) {
      return [i, h.median, (h.commit ? String(h.commit).slice(0, 10) : "?") + " " + (h.time || "") + ": " + secs(h.median)];
    });
    var labels = hist.map(function (h) { return h.commit ? String(h.commit).slice(0, 7) : "?"; });
    if (result.median !== null) { pts.push([pts.length, result.median, "this run: " + secs(result.median), "#e15759"]); labels.push("this run"); }
    var step = Math.max(1, Math.ceil(labels.length / 10)), ticks = [];
    for (var i = 0; i < labels.length; i += step) ticks.push(i);
    lineChart(container, {id: "h" + result.id, w: 760, points: pts, xdom: [-0.5, Math.max(pts.length - 0.5, 0.5)], xlog: false,
      xticks: ticks, xfmt: function (v) { return labels[v] || ""; }, xlabel: "accepted baselines, oldest first (commit)",
      ylabel: "median latency (s)", yfmt: secs});
  }

  document.querySelectorAll("[data-chart]").forEach(function (c) {
    try {
      var kind = c.getAttribute("data-chart");
      if (kind === "roofline") drawRoofline(c, byId[c.getAttribute("data-result")]);
      else if (kind === "history") drawHistory(c, byId[c.getAttribute("data-result")]);
      else drawSweep(c, DATA.sweeps[+c.getAttribute("data-sweep")], kind.replace("sweep-", ""));
    } catch (err) {
      c.textContent = "chart unavailable: " + err.message;
      throw err;
    }
  });
  document.addEventListener("click", function () {
    if (pinned) { pinned.classList.remove("pinned"); pinned = null; tip.hidden = true; }
  });

  /* Tables: click a header to sort; layer tables then show their top-k rows in that order. */
  function applyTopK(table) {
    var sel = document.querySelector('select.topk[data-result="' + table.getAttribute("data-result") + '"]');
    var k = sel ? +sel.value : 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r, i) { r.classList.toggle("hidden", k > 0 && i >= k); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () {
        var num = th.getAttribute("data-type") === "num";
        var desc = th.classList.contains("asc") || (num && !th.classList.contains("desc"));
        Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(desc ? "desc" : "asc");
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        function key(r) {
          var cell = r.cells[col];
          if (!num) return cell.textContent;
          var v = parseFloat(cell.getAttribute("data-v"));
          return isNaN(v) ? -Infinity : v;
        }
        rows.sort(function (a, b) {
          var ka = key(a), kb = key(b), c = num ? ka - kb : String(ka).localeCompare(String(kb));
          return desc ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
        if (table.classList.contains("layers")) applyTopK(table);
      });
    });
  });
  document.querySelectorAll("select.topk").forEach(function (sel) {
    sel.addEventListener("change", function () {
      applyTopK(document.querySelector('table.layers[data-result="' + sel.getAttribute("data-result") + '"]'));
    });
  });

  /* What-if: estimated latency = measured median x (sum over op types of time / speedup) / kernel time. */
  document.querySelectorAll("table.whatif").forEach(function (table) {
    var result = byId[table.getAttribute("data-result")], out = table.querySelector(".estimate");
    var times = {};
    result.ops.forEach(function (o) { times[o[0]] = o[1]; });
    function update() {
      var total = 0;
      table.querySelectorAll("input[data-op]").forEach(function (inp) {
        var s = parseFloat(inp.value);
        total += (times[inp.getAttribute("data-op")] || 0) / (s > 0 ? s : 1);
      });
      out.textContent = secs(total * result.scale);
    }
    table.addEventListener("input", update);
    update();
  });
})();
