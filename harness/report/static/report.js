/* splitbrain report page: the timeline, the anomaly list and the detail pane.
 *
 * Plain JavaScript, no libraries, written for this project. The data is the JSON
 * document in #report-data (see harness/report/page.py): op columns with delta-coded
 * starts and indexes, fault periods, node states, series, anomalies, the cited ops
 * and node log lines. Times are microseconds since the test started.
 * When the first frame is drawn, window.__reportReady holds performance.now()
 * (milliseconds since navigation start) and <html data-ready="1"> is set.
 */
(function () {
  "use strict";

  var D = JSON.parse(document.getElementById("report-data").textContent);
  var TYPE_COL = ["#2a9d8f", "#e76f51", "#f4a261", "#9e9e9e"];
  var TYPE_NAME = ["ok", "fail", "info", "never completed"];
  var ROLE_COL = { leader: "#1b4332", follower: "#95d5b2", candidate: "#f3a712", unreachable: "#d0d0d0" };
  var NODE_PAL = ["#1d3557", "#e63946", "#2a9d8f", "#f4a261", "#6a4c93", "#8ab17d", "#bc6c25", "#0081a7", "#ef476f", "#5c677d"];
  var LABEL_W = 118;
  var HOT = "#d00000";

  // ---- the op columns, decoded once into typed arrays ----
  var O = D.ops;
  var n = O.n;
  function column(v, T) {
    var a = new T(n);
    if (typeof v === "number") { a.fill(v); } else { for (var i = 0; i < n; i++) { a[i] = v[i]; } }
    return a;
  }
  function running(v) {
    var a = new Float64Array(n), s = 0;
    for (var i = 0; i < n; i++) { s += v[i]; a[i] = s; }
    return a;
  }
  var start = running(O.start);
  var dur = column(O.dur, Float64Array);
  var lane = column(O.lane, Int32Array);
  var type = column(O.type, Int8Array);
  var fcol = column(O.f, Int32Array);
  var inv = running(O.inv);
  var comp = new Float64Array(n);
  for (var i0 = 0; i0 < n; i0++) { comp[i0] = O.comp[i0] < 0 ? -1 : inv[i0] + O.comp[i0]; }
  var nodeCol = column(O.node, Int32Array);
  var keyCol = column(O.key, Int32Array);
  var errCol = column(O.err, Int32Array);
  var nLanes = Math.max(1, O.lanes.length);

  var tEnd = Math.max(1, D.meta.end || 0);
  for (var i1 = 0; i1 < n; i1++) {
    var e1 = start[i1] + Math.max(0, dur[i1]);
    if (e1 > tEnd) { tEnd = e1; }
  }
  function endOf(i) { return dur[i] < 0 ? tEnd : start[i] + dur[i]; }

  // Rows per type (drawn in one colour each) and per lane, sorted by start (for hovering).
  var byType = [[], [], [], []];
  var laneRows = [];
  for (var l = 0; l < nLanes; l++) { laneRows.push([]); }
  for (var i2 = 0; i2 < n; i2++) {
    byType[type[i2]].push(i2);
    laneRows[lane[i2]].push(i2);
  }
  byType = byType.map(function (a) { return Int32Array.from(a); });
  laneRows = laneRows.map(function (a) {
    return Int32Array.from(a).sort(function (x, y) { return start[x] - start[y]; });
  });

  // Rows of the ops the results cite, by history index (invoke or completion).
  var rowOf = new Map();
  var named = D.named || { ops: [], by: {} };
  (function () {
    var want = named.by;
    for (var i = 0; i < n; i++) {
      if (want[inv[i]] !== undefined) { rowOf.set(inv[i], i); }
      if (comp[i] >= 0 && want[comp[i]] !== undefined) { rowOf.set(comp[i], i); }
    }
  })();

  var focusKey = -1;
  if (D.meta.focusKey !== null && D.meta.focusKey !== undefined) {
    focusKey = O.keys.indexOf(D.meta.focusKey);
  }

  // ---- formatting ----
  function secs(us) { return (us / 1e6).toFixed(3) + " s"; }
  function esc(s) {
    return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function spanText(us) {
    if (us >= 1e6) { return (us / 1e6).toFixed(us >= 1e7 ? 1 : 2) + " s"; }
    if (us >= 1e3) { return (us / 1e3).toFixed(1) + " ms"; }
    return Math.round(us) + " µs";
  }

  // ---- layout: the sections of the canvas, top to bottom ----
  var canvas = document.getElementById("timeline");
  var ctx = canvas.getContext("2d");
  var faultKinds = [];
  D.faults.forEach(function (f) { if (faultKinds.indexOf(f[0]) < 0) { faultKinds.push(f[0]); } });
  var nodes = Object.keys(D.states || {}).sort();
  var committedNodes = Object.keys(D.committed || {}).sort();
  var latencyNames = Object.keys(D.latency || {}).sort();
  var throughputNames = Object.keys(D.throughput || {}).sort();
  function tpColour(nm, r) {
    var t = nm.slice(nm.lastIndexOf(" ") + 1);
    return t === "ok" ? NODE_PAL[r % NODE_PAL.length] : TYPE_COL[Math.max(0, TYPE_NAME.indexOf(t))];
  }
  var laneH = Math.max(2, Math.min(14, Math.floor(420 / nLanes)));
  var S = {};

  function layout() {
    var y = 0;
    S.axis = { top: y, h: 20 }; y += 20;
    S.faults = { top: y, h: faultKinds.length ? faultKinds.length * 12 + 4 : 0 }; y += S.faults.h;
    S.lanes = { top: y, h: nLanes * laneH + 4 }; y += S.lanes.h;
    S.states = { top: y, h: nodes.length ? nodes.length * 14 + 6 : 0 }; y += S.states.h;
    S.committed = { top: y, h: committedNodes.length ? 80 : 0 }; y += S.committed.h;
    S.latency = { top: y, h: latencyNames.length ? 90 : 0 }; y += S.latency.h;
    S.throughput = { top: y, h: throughputNames.length ? 70 : 0 }; y += S.throughput.h;
    S.height = y + 4;
    var w = canvas.parentElement.clientWidth || 900;
    var dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(S.height * dpr);
    canvas.style.height = S.height + "px";
    S.w = w;
    S.dpr = dpr;
  }

  // ---- the view (a time range) ----
  var view = { t0: 0, t1: tEnd };
  var pending = false;
  function plotW() { return S.w - LABEL_W; }
  function xOf(t) { return LABEL_W + (t - view.t0) * plotW() / (view.t1 - view.t0); }
  function tOf(x) { return view.t0 + (x - LABEL_W) * (view.t1 - view.t0) / plotW(); }
  function setView(a, b) {
    var span = Math.max(20, b - a);
    var maxSpan = tEnd * 1.1 + 1;
    if (span > maxSpan) { span = maxSpan; }
    var lo = Math.max(-tEnd * 0.05, Math.min(a, tEnd * 1.05 - span));
    view.t0 = lo;
    view.t1 = lo + span;
    canvas.setAttribute("data-view", Math.round(view.t0) + "," + Math.round(view.t1));
    document.getElementById("view-label").textContent =
      secs(view.t0) + " – " + secs(view.t1) + " (" + spanText(view.t1 - view.t0) + ")";
    schedule();
  }
  function schedule() {
    if (pending) { return; }
    pending = true;
    requestAnimationFrame(function () { pending = false; draw(); });
  }

  // ---- drawing ----
  var hot = [];       // rows of the selected example
  var hotTimes = [];  // times of cited ops that are not client ops (samples, faults)

  function niceStep(span, px) {
    var raw = span / Math.max(1, px / 110);
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }

  function drawAxis() {
    var step = niceStep(view.t1 - view.t0, plotW());
    ctx.fillStyle = "#444";
    ctx.font = "11px system-ui, sans-serif";
    ctx.strokeStyle = "#e6e6e6";
    ctx.lineWidth = 1;
    var first = Math.ceil(view.t0 / step) * step;
    for (var t = first; t <= view.t1; t += step) {
      var x = Math.round(xOf(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, S.axis.top + 14); ctx.lineTo(x, S.height); ctx.stroke();
      var label = step >= 1e6 ? (t / 1e6).toFixed(step >= 1e7 ? 0 : 1) + "s"
        : step >= 1e3 ? (t / 1e6).toFixed(Math.min(6, 3 - Math.floor(Math.log10(step / 1e3)))) + "s"
          : (t / 1e6).toFixed(6) + "s";
      ctx.fillText(label, x + 2, S.axis.top + 11);
    }
  }

  function drawFaults() {
    if (!S.faults.h) { return; }
    D.faults.forEach(function (f) {
      var row = faultKinds.indexOf(f[0]);
      var x0 = Math.max(LABEL_W, xOf(f[1])), x1 = Math.min(S.w, xOf(f[2]));
      if (x1 < LABEL_W || x0 > S.w) { return; }
      var w = Math.max(1, x1 - x0);
      ctx.fillStyle = f[3];
      ctx.fillRect(x0, S.faults.top + 2 + row * 12, w, 10);
      ctx.globalAlpha = 0.10;
      ctx.fillRect(x0, S.lanes.top, w, S.lanes.h);
      ctx.globalAlpha = 1;
    });
  }

  function drawLanes() {
    var top = S.lanes.top + 2;
    ctx.fillStyle = "#f7f7f9";
    for (var l = 0; l < nLanes; l += 2) { ctx.fillRect(LABEL_W, top + l * laneH, plotW(), laneH); }
    var scale = plotW() / (view.t1 - view.t0);
    var h = Math.max(1, laneH - (laneH > 4 ? 2 : 0));
    var last = new Float64Array(nLanes);
    for (var ty = 0; ty < 4; ty++) {
      var rows = byType[ty];
      ctx.fillStyle = TYPE_COL[ty];
      last.fill(-1e9);
      for (var k = 0; k < rows.length; k++) {
        var i = rows[k];
        var s = start[i], e = endOf(i);
        if (e < view.t0 || s > view.t1) { continue; }
        var x0 = LABEL_W + (s - view.t0) * scale;
        var w = (e - s) * scale;
        if (x0 < LABEL_W) { w -= LABEL_W - x0; x0 = LABEL_W; }
        var ln = lane[i];
        if (w < 1) {
          var px = x0 | 0;
          if (last[ln] === px) { continue; }
          last[ln] = px;
          w = 1;
        }
        ctx.fillRect(x0, top + ln * laneH, w, h);
      }
    }
    if (focusKey >= 0) {
      ctx.strokeStyle = "#6a00f4";
      ctx.lineWidth = 1;
      for (var j = 0; j < n; j++) {
        if (keyCol[j] !== focusKey) { continue; }
        var s2 = start[j], e2 = endOf(j);
        if (e2 < view.t0 || s2 > view.t1) { continue; }
        ctx.strokeRect(Math.max(LABEL_W, xOf(s2)) - 0.5, top + lane[j] * laneH - 0.5,
          Math.max(2, (e2 - s2) * scale) + 1, h + 1);
      }
    }
  }

  function drawHot() {
    if (!hot.length && !hotTimes.length) { return; }
    var top = S.lanes.top + 2;
    var scale = plotW() / (view.t1 - view.t0);
    ctx.strokeStyle = HOT;
    ctx.globalAlpha = 0.55;
    ctx.setLineDash([4, 3]);
    ctx.lineWidth = 1;
    var marks = hot.map(function (i) { return start[i]; }).concat(hotTimes);
    marks.forEach(function (t) {
      var x = Math.round(xOf(t)) + 0.5;
      if (x < LABEL_W || x > S.w) { return; }
      ctx.beginPath(); ctx.moveTo(x, S.axis.top + 14); ctx.lineTo(x, S.height); ctx.stroke();
    });
    ctx.setLineDash([]);
    ctx.globalAlpha = 1;
    ctx.lineWidth = 2;
    hot.forEach(function (i) {
      var s = start[i], e = endOf(i);
      if (e < view.t0 || s > view.t1) { return; }
      var x0 = Math.max(LABEL_W, xOf(s));
      ctx.strokeRect(x0 - 1, top + lane[i] * laneH - 1, Math.max(3, (e - s) * scale) + 2, Math.max(3, laneH));
    });
  }

  function stateAt(node, t) {
    var st = D.states[node];
    var lo = 0, hi = st.t.length - 1, got = -1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (st.t[mid] <= t) { got = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return got;
  }

  function drawStates() {
    if (!S.states.h) { return; }
    ctx.font = "10px system-ui, sans-serif";
    nodes.forEach(function (node, r) {
      var st = D.states[node];
      var y = S.states.top + 4 + r * 14;
      for (var k = 0; k < st.t.length; k++) {
        var s = st.t[k], e = k + 1 < st.t.length ? st.t[k + 1] : tEnd;
        if (e < view.t0 || s > view.t1) { continue; }
        var x0 = Math.max(LABEL_W, xOf(s)), x1 = Math.min(S.w, xOf(e));
        var role = D.roles[st.role[k]];
        ctx.fillStyle = ROLE_COL[role] || "#9aa7b8";
        ctx.fillRect(x0, y, Math.max(1, x1 - x0), 12);
        if (x1 - x0 > 30 && st.term[k] !== null) {
          ctx.fillStyle = role === "leader" ? "#fff" : "#222";
          ctx.fillText("t" + st.term[k], x0 + 3, y + 10);
        }
      }
    });
  }

  function drawSeries(sec, series, names, colourOf, logY) {
    if (!sec.h) { return; }
    var lo = Infinity, hi = -Infinity;
    names.forEach(function (nm) {
      var p = series[nm];
      for (var k = 1; k < p.length; k += 2) { if (p[k] < lo) { lo = p[k]; } if (p[k] > hi) { hi = p[k]; } }
    });
    if (!isFinite(lo)) { return; }
    if (logY) { lo = Math.log10(Math.max(lo, 0.01)); hi = Math.log10(Math.max(hi, 0.01)); }
    if (hi <= lo) { hi = lo + 1; }
    var top = sec.top + 6, h = sec.h - 12;
    function yOf(v) { var u = logY ? Math.log10(Math.max(v, 0.01)) : v; return top + h - (u - lo) / (hi - lo) * h; }
    ctx.fillStyle = "#fcfcfd";
    ctx.fillRect(LABEL_W, sec.top + 2, plotW(), sec.h - 4);
    names.forEach(function (nm, r) {
      var p = series[nm];
      ctx.strokeStyle = ctx.fillStyle = colourOf(nm, r);
      if (logY) {
        for (var k = 0; k < p.length; k += 2) {
          if (p[k] < view.t0 || p[k] > view.t1) { continue; }
          ctx.fillRect(xOf(p[k]) - 1, yOf(p[k + 1]) - 1, 2.5, 2.5);
        }
      } else {
        ctx.lineWidth = 1.3;
        ctx.beginPath();
        var started = false;
        for (var j = 0; j < p.length; j += 2) {
          var x = xOf(p[j]), y = yOf(p[j + 1]);
          if (!started) { ctx.moveTo(x, y); started = true; } else { ctx.lineTo(x, y); }
        }
        ctx.stroke();
      }
    });
    ctx.fillStyle = "#666";
    ctx.font = "10px system-ui, sans-serif";
    var top_ = logY ? Math.pow(10, hi) : hi, bot = logY ? Math.pow(10, lo) : lo;
    ctx.fillText(String(+top_.toPrecision(3)), LABEL_W + 3, top + 8);
    ctx.fillText(String(+bot.toPrecision(3)), LABEL_W + 3, top + h);
  }

  function drawLabels() {
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, LABEL_W - 2, S.height);
    ctx.fillStyle = "#333";
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText("time", 4, S.axis.top + 12);
    faultKinds.forEach(function (k, r) { ctx.fillText(k, 4, S.faults.top + 11 + r * 12); });
    if (laneH >= 9) {
      ctx.font = "10px system-ui, sans-serif";
      O.lanes.forEach(function (nm, l) { ctx.fillText(nm.slice(0, 20), 4, S.lanes.top + 2 + l * laneH + laneH - 3); });
    } else {
      ctx.fillText(nLanes + " workers", 4, S.lanes.top + 14);
      ctx.fillStyle = "#777"; ctx.font = "10px system-ui, sans-serif";
      ctx.fillText("(hover for ops)", 4, S.lanes.top + 26);
    }
    ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif";
    nodes.forEach(function (node, r) { ctx.fillText(node + " role", 4, S.states.top + 14 + r * 14); });
    if (S.committed.h) { ctx.fillText("committed index", 4, S.committed.top + 14); }
    if (S.latency.h) { ctx.fillText("latency (ms, log)", 4, S.latency.top + 14); }
    if (S.throughput.h) {
      ctx.fillText("throughput (ops/s)", 4, S.throughput.top + 14);
      ctx.font = "10px system-ui, sans-serif";
      throughputNames.slice(0, 4).forEach(function (nm, r) {
        ctx.fillStyle = tpColour(nm, r);
        ctx.fillText(nm, 8, S.throughput.top + 28 + r * 11);
      });
      ctx.fillStyle = "#333";
      ctx.font = "11px system-ui, sans-serif";
    }
    ctx.strokeStyle = "#ccc";
    ctx.lineWidth = 1;
    [S.faults, S.lanes, S.states, S.committed, S.latency, S.throughput].forEach(function (sec) {
      if (!sec.h) { return; }
      ctx.beginPath(); ctx.moveTo(0, sec.top + 0.5); ctx.lineTo(S.w, sec.top + 0.5); ctx.stroke();
    });
  }

  function draw() {
    ctx.setTransform(S.dpr, 0, 0, S.dpr, 0, 0);
    ctx.clearRect(0, 0, S.w, S.height);
    drawAxis();
    drawFaults();
    drawLanes();
    drawStates();
    drawSeries(S.committed, D.committed, committedNodes, function (nm, r) { return NODE_PAL[r % NODE_PAL.length]; }, false);
    drawSeries(S.latency, D.latency, latencyNames, function (nm) {
      var t = nm.slice(nm.lastIndexOf(" ") + 1);
      return TYPE_COL[Math.max(0, TYPE_NAME.indexOf(t))];
    }, true);
    drawSeries(S.throughput, D.throughput, throughputNames, tpColour, false);
    drawHot();
    drawLabels();
  }

  // ---- the legend ----
  (function () {
    var parts = [];
    TYPE_NAME.forEach(function (t, k) {
      parts.push("<span class='item'><span class='swatch' style='background:" + TYPE_COL[k] + "'></span>" + t + "</span>");
    });
    var seen = {};
    D.faults.forEach(function (f) {
      if (seen[f[0]]) { return; }
      seen[f[0]] = 1;
      parts.push("<span class='item'><span class='swatch' style='background:" + esc(f[3]) + "'></span>" + esc(f[0]) + "</span>");
    });
    D.roles.forEach(function (r) {
      parts.push("<span class='item'><span class='swatch' style='background:" + (ROLE_COL[r] || "#9aa7b8") + "'></span>" + esc(r) + "</span>");
    });
    committedNodes.forEach(function (nd, r) {
      parts.push("<span class='item'><span class='swatch' style='background:" + NODE_PAL[r % NODE_PAL.length] + ";height:3px'></span>" + esc(nd) + "</span>");
    });
    parts.push("<span class='item'><span class='swatch' style='border:2px solid " + HOT + "'></span>cited ops</span>");
    if (focusKey >= 0) {
      parts.push("<span class='item'><span class='swatch' style='border:1px solid #6a00f4'></span>key " + esc(D.meta.focusKey) + "</span>");
    }
    var notes = [];
    if (!D.meta.sampler) { notes.push("no sampler ops in this history: node roles, terms and committed indexes are not shown"); }
    if (O.dropped) { notes.push(O.dropped.toLocaleString() + " ops past the page's limit are not drawn (cited ops always are)"); }
    if (n === 0) { notes.push("no client ops in this history"); }
    document.getElementById("legend").innerHTML = parts.join("") +
      notes.map(function (t) { return "<div class='note-box'>" + esc(t) + "</div>"; }).join("");
  })();

  // ---- hovering ----
  var tip = document.getElementById("tip");
  function opText(i) {
    var e = endOf(i);
    var lines = [
      "#" + inv[i] + (comp[i] >= 0 ? " → #" + comp[i] : " (never completed)") + "  " + O.fs[fcol[i]] + "  " + TYPE_NAME[type[i]],
      "worker " + O.lanes[lane[i]] + (nodeCol[i] >= 0 ? "  node " + O.nodes[nodeCol[i]] : "") +
        (keyCol[i] >= 0 ? "  key " + O.keys[keyCol[i]] : ""),
      secs(start[i]) + " .. " + (dur[i] < 0 ? "end" : secs(e)) + (dur[i] >= 0 ? "  (" + spanText(dur[i]) + ")" : "")
    ];
    if (errCol[i] >= 0) { lines.push("error: " + O.errors[errCol[i]]); }
    return lines.join("\n");
  }
  function hit(x, y) {
    var t = tOf(x), tol = 3 * (view.t1 - view.t0) / plotW();
    if (x < LABEL_W) { return null; }
    if (y >= S.faults.top && y < S.faults.top + S.faults.h) {
      var kind = faultKinds[Math.floor((y - S.faults.top - 2) / 12)];
      var f = D.faults.filter(function (p) { return p[0] === kind && p[1] - tol <= t && t <= p[2] + tol; })[0];
      return f ? f[0] + "  " + secs(f[1]) + " .. " + secs(f[2]) + (f[4] ? "\n" + f[4] : "") : null;
    }
    if (y >= S.lanes.top && y < S.lanes.top + S.lanes.h) {
      var l = Math.floor((y - S.lanes.top - 2) / laneH);
      var rows = laneRows[l];
      if (!rows) { return null; }
      var lo = 0, hi = rows.length;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (start[rows[mid]] <= t + tol) { lo = mid + 1; } else { hi = mid; } }
      for (var k = lo - 1; k >= 0 && k >= lo - 400; k--) {
        if (endOf(rows[k]) >= t - tol) { return opText(rows[k]); }
      }
      return null;
    }
    if (y >= S.states.top && y < S.states.top + S.states.h) {
      var node = nodes[Math.floor((y - S.states.top - 4) / 14)];
      if (!node) { return null; }
      var k2 = stateAt(node, t);
      if (k2 < 0) { return node + ": not sampled yet"; }
      var st = D.states[node];
      return node + " at " + secs(t) + ": " + D.roles[st.role[k2]] +
        (st.term[k2] !== null ? ", term " + st.term[k2] : "") + (st.leader[k2] ? ", leader " + st.leader[k2] : "") +
        "\nsince " + secs(st.t[k2]);
    }
    return secs(t);
  }
  canvas.addEventListener("mousemove", function (ev) {
    if (drag) { return; }
    var r = canvas.getBoundingClientRect();
    var text = hit(ev.clientX - r.left, ev.clientY - r.top);
    if (!text) { tip.hidden = true; return; }
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = Math.min(window.innerWidth - 540, ev.clientX + 14) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });

  // ---- zooming and panning ----
  function zoomAt(x, factor) {
    var t = tOf(Math.max(LABEL_W, x));
    setView(t - (t - view.t0) * factor, t + (view.t1 - t) * factor);
  }
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var r = canvas.getBoundingClientRect();
    if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
      var d = (ev.deltaX || ev.deltaY) * (view.t1 - view.t0) / plotW();
      setView(view.t0 + d, view.t1 + d);
      return;
    }
    zoomAt(ev.clientX - r.left, Math.pow(1.0015, ev.deltaY));
  }, { passive: false });
  var drag = null;
  canvas.addEventListener("mousedown", function (ev) {
    drag = { x: ev.clientX, t0: view.t0, t1: view.t1 };
    tip.hidden = true;
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) { return; }
    var d = (drag.x - ev.clientX) * (drag.t1 - drag.t0) / plotW();
    setView(drag.t0 + d, drag.t1 + d);
  });
  window.addEventListener("mouseup", function () { drag = null; });
  canvas.addEventListener("dblclick", function () { setView(0, tEnd); });
  document.getElementById("zoom-all").addEventListener("click", function () { setView(0, tEnd); });
  document.getElementById("zoom-in").addEventListener("click", function () { zoomAt(LABEL_W + plotW() / 2, 0.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoomAt(LABEL_W + plotW() / 2, 2); });
  window.addEventListener("resize", function () { layout(); schedule(); });

  // ---- the anomaly list ----
  var list = document.getElementById("anomalies");
  var items = [];
  function exampleLabel(ex) {
    var bits = [];
    Object.keys(ex.fields).forEach(function (k) { bits.push(k + "=" + ex.fields[k]); });
    var idx = ex.indexes.length ? "#" + ex.indexes.slice(0, 4).join(",#") + (ex.indexes.length > 4 ? "…" : "") : "no ops cited";
    return idx + "  " + bits.join(" ");
  }
  // Anomalies first; a checker's notes (remarks, not anomalies) under a heading of their own.
  var noteCount = D.anomalies.filter(function (g) { return g.note; }).length;
  if (noteCount === D.anomalies.length) {
    list.innerHTML = "<p class='dim' id='no-anomalies'>None: the checkers found no anomaly.</p>";
  }
  D.anomalies.forEach(function (g, gi) {
    if (g.note && (gi === 0 || !D.anomalies[gi - 1].note)) {
      var h = document.createElement("h3");
      h.id = "notes-head";
      h.textContent = "Notes (not anomalies)";
      list.appendChild(h);
    }
    var div = document.createElement("div");
    div.className = "kind" + (g.note ? " note" : "");
    var count = g.exact ? g.count.toLocaleString() : (g.count >= 20 ? "≥ " + g.count : String(g.count));
    div.innerHTML = "<div class='kind-head'>" + esc(g.kind) +
      " <span class='count'>" + count + "</span> <span class='src'>" + esc(g.checkers.join(", ")) + "</span></div>" +
      (g.examples.length < g.count ? "<div class='more'>showing the first " + g.examples.length + " of " + count + "</div>" : "");
    var ul = document.createElement("ul");
    ul.className = "examples";
    g.examples.forEach(function (ex, xi) {
      var li = document.createElement("li");
      li.textContent = exampleLabel(ex);
      li.title = li.textContent;
      li.setAttribute("data-kind", g.kind);
      li.setAttribute("data-example", gi + ":" + xi);
      if (!ex.indexes.length) { li.className = "nolink"; }
      li.addEventListener("click", function () { select(gi, xi, true); });
      ul.appendChild(li);
      items.push(li);
    });
    div.appendChild(ul);
    list.appendChild(div);
  });

  // ---- selecting an example: zoom, highlight, detail ----
  function namedOp(idx) {
    var k = named.by[idx];
    return k === undefined ? null : named.ops[k];
  }
  function select(gi, xi, zoom) {
    var g = D.anomalies[gi], ex = g.examples[xi];
    items.forEach(function (li) { li.classList.toggle("selected", li.getAttribute("data-example") === gi + ":" + xi); });
    var rows = [], times = [], ops = [], seen = {};
    ex.indexes.forEach(function (idx) {
      var r = rowOf.get(idx);
      if (r !== undefined && rows.indexOf(r) < 0) { rows.push(r); }
      var op = namedOp(idx);
      if (op && !seen[op.i]) {
        seen[op.i] = 1;
        ops.push(op);
        times.push(op.t0);
        if (op.t1 !== null) { times.push(op.t1); }
      }
      if (r !== undefined) { times.push(start[r]); times.push(endOf(r)); }
    });
    hot = rows;
    hotTimes = ops.filter(function (op) { return rowOf.get(op.i) === undefined; }).map(function (op) { return op.t0; });
    var lo = times.length ? Math.min.apply(null, times) : null;
    var hi = times.length ? Math.max.apply(null, times) : null;
    if (zoom && lo !== null) {
      var pad = Math.max((hi - lo) * 0.6, 300000);
      setView(lo - pad, hi + pad);
      document.getElementById("canvas-wrap").scrollIntoView({ block: "nearest" });
    } else {
      schedule();
    }
    renderDetail(g, ex, ops, lo, hi);
  }

  function table(head, rows) {
    return "<table><tr>" + head.map(function (h) { return "<th>" + esc(h) + "</th>"; }).join("") + "</tr>" +
      rows.map(function (r) { return "<tr>" + r.map(function (c) { return "<td>" + c + "</td>"; }).join("") + "</tr>"; }).join("") +
      "</table>";
  }

  function renderDetail(g, ex, ops, lo, hi) {
    var h = [];
    h.push("<h2>" + (g.note ? "Note: " : "") + esc(g.kind) + " <span class='dim'>(" +
      (g.exact ? g.count.toLocaleString() + " in all" : g.examples.length + " shown") + "; found by " + esc(g.checkers.join(", ")) + ")</span></h2>");
    var f = Object.keys(ex.fields);
    if (f.length) {
      h.push("<table class='kv'>" + f.map(function (k) { return "<tr><th>" + esc(k) + "</th><td><code>" + esc(ex.fields[k]) + "</code></td></tr>"; }).join("") + "</table>");
    }
    h.push("<h3>Ops cited: " + (ex.indexes.length ? ex.indexes.map(function (i) { return "#" + i; }).join(", ") : "none") + "</h3>");
    if (ops.length) {
      h.push(table(["history #", "process", "op", "key", "node", "result", "from", "to", "latency", "sent", "got", "error"],
        ops.sort(function (a, b) { return a.t0 - b.t0; }).map(function (op) {
          return ["<span class='idx'>#" + op.i + (op.c !== null ? " → #" + op.c : "") + "</span>", esc(op.p), esc(op.f), esc(op.key),
            esc(op.node), esc(op.type), secs(op.t0), op.t1 === null ? "" : secs(op.t1),
            op.t1 === null ? "" : spanText(op.t1 - op.t0), "<code>" + esc(op.in) + "</code>",
            "<code>" + esc(op.out) + "</code>", esc(op.error)];
        })));
    } else if (ex.indexes.length) {
      h.push("<p class='dim'>The cited ops are not in this history.</p>");
    }
    if (lo !== null) {
      var faults = D.faults.filter(function (p) { return p[1] <= hi && p[2] >= lo; });
      h.push("<h3>Faults in force from " + secs(lo) + " to " + secs(hi) + "</h3>");
      h.push(faults.length ? table(["fault", "from", "to", "what"], faults.map(function (p) {
        return ["<span class='swatch' style='background:" + esc(p[3]) + "'></span>" + esc(p[0]), secs(p[1]), secs(p[2]), esc(p[4])];
      })) : "<p class='dim'>None.</p>");
      if (nodes.length) {
        h.push("<h3>Nodes at " + secs(lo) + " (from the sampler)</h3>");
        h.push(table(["node", "role", "term", "leader", "since"], nodes.map(function (nd) {
          var k = stateAt(nd, lo), st = D.states[nd];
          if (k < 0) { return [esc(nd), "not sampled yet", "", "", ""]; }
          return [esc(nd), esc(D.roles[st.role[k]]), esc(st.term[k]), esc(st.leader[k]), secs(st.t[k])];
        })));
      }
      h.push(logsHtml(ex, lo, hi));
    }
    document.getElementById("detail").innerHTML = h.join("");
  }

  function logsHtml(ex, lo, hi) {
    var L = D.logs, out = [];
    out.push("<h3>Node logs within " + (L.padMs / 1000) + " s of these ops</h3>");
    var origin = D.meta.origin;
    if (!origin) {
      out.push("<p class='note-box'>The history's start in wall-clock time is unknown (no run directory " +
        "name or splitbrain.log), so node log lines cannot be placed on its clock. Files: " +
        esc(Object.keys(L.files).map(function (k) { return L.files[k].join(", "); }).join("; ") || "none") + "</p>");
      return out.join("");
    }
    out.push("<p class='note-box'>Aligned by " + esc(origin.method) +
      (origin.spread_ms !== null && origin.spread_ms !== undefined ? "; the faults used disagree by up to " + origin.spread_ms.toFixed(1) + " ms" : "; precision unknown (milliseconds to a second)") +
      ". Each line shows its time on the history's clock, then its own stamp (UTC). Lines of a node whose clock a fault moved are shifted back by that offset (marked).</p>");
    if (L.unreliable.length) {
      out.push("<p class='note-box'>Clock strobing on " + esc(L.unreliable.join(", ")) + ": those nodes' stamps are unreliable in that period.</p>");
    }
    var w = ex.log === null ? null : L.windows[ex.log];
    var nodesWithFiles = Object.keys(L.files).sort();
    if (!nodesWithFiles.length) {
      out.push("<p class='dim'>No node logs were fetched into nodes/ for this run.</p>");
      return out.join("");
    }
    nodesWithFiles.forEach(function (nd) {
      var lines = (w && w[nd]) || [];
      out.push("<div><b>" + esc(nd) + "</b> <span class='dim'>" + esc(L.files[nd].join(", ")) + " · " + lines.length + " line(s)" +
        (L.cut.indexOf(ex.log) >= 0 ? " (cut at the first lines)" : "") + "</span></div>");
      if (!lines.length) { return; }
      out.push("<div class='logs'>" + lines.map(function (ln) {
        var t = ln[0] * 1000;
        var near = t >= lo && t <= hi;
        return "<div" + (near ? " class='near'" : "") + "><span class='t'>" + (ln[0] / 1000).toFixed(3) + "s " + esc(ln[1]) + "</span> " +
          (ln[3] !== null ? "<span class='shift'>[clock " + (ln[3] > 0 ? "+" : "") + ln[3] + " ms]</span> " : "") + esc(ln[2]) + "</div>";
      }).join("") + "</div>");
    });
    return out.join("");
  }

  // ---- coverage: a reached situation's first time opens that moment on the timeline ----
  Array.prototype.forEach.call(document.querySelectorAll("#coverage button.cov-t"), function (b) {
    b.addEventListener("click", function () {
      var t = Number(b.getAttribute("data-t"));
      setView(t - 2e6, t + 2e6);
      document.getElementById("explain").scrollIntoView({ behavior: "smooth" });
    });
  });

  // ---- first frame ----
  layout();
  setView(0, tEnd);
  var first = -1;
  for (var gi = 0; gi < D.anomalies.length && first < 0; gi++) {
    var g = D.anomalies[gi];
    if (g.examples.length && (focusKey < 0 ? !g.note : g.kind === "nonlinearizable")) { first = gi; }
  }
  if (first >= 0) { select(first, 0, false); }
  requestAnimationFrame(function () {
    pending = false;
    draw();
    window.__report = {
      view: view,
      select: select,
      rows: n,
      // Where the op of a history index is drawn, in CSS pixels of the canvas (for tests).
      pointOf: function (idx) {
        var r = rowOf.get(idx);
        if (r === undefined) { return null; }
        var mid = (Math.max(start[r], view.t0) + Math.min(endOf(r), view.t1)) / 2;
        return { x: xOf(mid), y: S.lanes.top + 2 + lane[r] * laneH + laneH / 2 };
      }
    };
    window.__reportReady = performance.now();
    document.documentElement.setAttribute("data-ready", "1");
  });
})();
