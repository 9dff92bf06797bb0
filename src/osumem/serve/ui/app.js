/* OSU-Mem viewer: the trajectory as a timeline, its units as bands per view, and a
 * query's retrieved steps with their explanation. Plain JavaScript, no libraries, no
 * network in the saved page; served at /ui it asks the server's JSON API with the
 * bearer token typed into the form (kept in this page's memory only). */
(function () {
  "use strict";

  var ROLE_COLORS = { user: "#3b6fd4", assistant: "#3a9d5d", tool: "#c9822b" };
  var VIEW_COLORS = { entity: "#6f42c1", tool: "#c9822b", subgoal: "#2f8f9d", similarity: "#8a8a8a" };
  var HIT = "#d6336c", MEMBER = "#6f42c1";
  var LANES_PER_VIEW = 8, LANE_H = 7, LANE_GAP = 2, STEPS_H = 36, VIEW_GAP = 8, LABEL_W = 70;
  var started = performance.now();

  var $ = function (id) { return document.getElementById(id); };
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) { for (var k in attrs) { node.setAttribute(k, attrs[k]); } }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }

  var S = {
    data: null, n: 0, pps: 4, selectedUnit: -1, members: null, retrieved: null,
    rankOf: null, why: null, current: -1, lanes: [], unitsOf: null, token: null,
    server: false, namespace: null, rowH: 22, ready: false
  };

  /* ---- data ------------------------------------------------------------------ */

  function load(data) {
    S.data = data; S.n = data.n; S.selectedUnit = -1; S.members = null; S.current = -1;
    S.retrieved = null; S.rankOf = null; S.why = null;
    var u = data.units, m = u.key.length;
    // steps -> units (inverse of the CSR membership)
    var counts = new Int32Array(S.n + 1);
    for (var i = 0; i < u.indices.length; i++) { counts[u.indices[i] + 1]++; }
    for (var p = 0; p < S.n; p++) { counts[p + 1] += counts[p]; }
    var fill = counts.slice(0, S.n), of = new Int32Array(u.indices.length);
    for (var j = 0; j < m; j++) {
      for (var k = u.indptr[j]; k < u.indptr[j + 1]; k++) { of[fill[u.indices[k]]++] = j; }
    }
    S.unitsOf = { ptr: counts, ids: of };
    S.first = new Int32Array(m); S.last = new Int32Array(m);
    for (j = 0; j < m; j++) {
      S.first[j] = u.indices[u.indptr[j]];
      S.last[j] = u.indices[u.indptr[j + 1] - 1];
    }
    assignLanes();
    var width = $("timeline").clientWidth - LABEL_W;
    S.pps = Math.max(0.05, Math.min(8, width / Math.max(1, S.n)));
    if (S.n > 2000) { S.pps = Math.max(S.pps, 3); }
    describe();
    unitList();
    layout();
    if (data.query) { showAnswer(data.query); }
    else { clear($("result")); }
    renderAll();
  }

  function unitsOfStep(p) {
    var out = [];
    for (var k = S.unitsOf.ptr[p]; k < S.unitsOf.ptr[p + 1]; k++) { out.push(S.unitsOf.ids[k]); }
    return out;
  }
  function unitName(j) {
    var u = S.data.units;
    return u.views[u.view[j]] + ":" + u.key[j] + "@" + S.first[j] + "-" + S.last[j];
  }
  function unitMembers(j) {
    var u = S.data.units;
    return u.indices.slice(u.indptr[j], u.indptr[j + 1]);
  }

  // Per view, units go to the first lane whose last unit ended before they start; past
  // LANES_PER_VIEW lanes they share the last one (the units list reaches every unit).
  function assignLanes() {
    var u = S.data.units, m = u.key.length;
    S.lanes = [];
    S.laneOf = new Int32Array(m);
    for (var v = 0; v < u.views.length; v++) {
      var ids = [];
      for (var j = 0; j < m; j++) { if (u.view[j] === v) { ids.push(j); } }
      ids.sort(function (a, b) { return S.first[a] - S.first[b] || S.last[a] - S.last[b]; });
      var ends = [];
      ids.forEach(function (j) {
        var lane = -1;
        for (var l = 0; l < ends.length; l++) { if (ends[l] < S.first[j]) { lane = l; break; } }
        if (lane < 0) { lane = ends.length < LANES_PER_VIEW ? ends.length : LANES_PER_VIEW - 1; }
        ends[lane] = Math.max(ends[lane] === undefined ? -1 : ends[lane], S.last[j]);
        S.laneOf[j] = lane;
      });
      S.lanes.push({ view: v, name: u.views[v], lanes: Math.max(1, ends.length), ids: ids });
    }
  }

  /* ---- layout and drawing ------------------------------------------------------ */

  function viewTop(v) {
    var y = STEPS_H + VIEW_GAP;
    for (var i = 0; i < v; i++) { y += S.lanes[i].lanes * (LANE_H + LANE_GAP) + VIEW_GAP; }
    return y;
  }
  function timelineHeight() { return viewTop(S.lanes.length) + 4; }

  function layout() {
    var canvas = $("timeline-canvas"), dpr = window.devicePixelRatio || 1;
    var w = $("timeline").clientWidth, h = timelineHeight();
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    canvas.style.height = h + "px";
    $("timeline-spacer").style.width = Math.ceil(S.n * S.pps + LABEL_W) + "px";
    var ov = $("overview");
    ov.width = Math.round(ov.clientWidth * dpr); ov.height = Math.round(28 * dpr);
  }

  function visibleRange() {
    var x0 = $("timeline-scroll").scrollLeft, w = $("timeline").clientWidth - LABEL_W;
    var a = Math.max(0, Math.floor(x0 / S.pps)), b = Math.min(S.n, Math.ceil((x0 + w) / S.pps) + 1);
    return [a, b, x0];
  }
  function stepX(p, x0) { return LABEL_W + p * S.pps - x0; }

  function drawTimeline() {
    var canvas = $("timeline-canvas"), ctx = canvas.getContext("2d");
    var dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    var w = canvas.width / dpr, h = canvas.height / dpr;
    ctx.clearRect(0, 0, w, h);
    var r = visibleRange(), a = r[0], b = r[1], x0 = r[2], st = S.data.steps;
    var maxCost = 1;
    for (var p = a; p < b; p++) { if (st.cost[p] > maxCost) { maxCost = st.cost[p]; } }
    var bw = Math.max(1, S.pps - (S.pps > 3 ? 1 : 0));
    for (p = a; p < b; p++) {
      var x = stepX(p, x0), hgt = 4 + (STEPS_H - 10) * Math.sqrt(st.cost[p] / maxCost);
      ctx.fillStyle = ROLE_COLORS[st.roles[st.role[p]]] || "#8a8a8a";
      ctx.fillRect(x, STEPS_H - hgt, bw, hgt);
      if (S.rankOf && S.rankOf.has(p)) { ctx.fillStyle = HIT; ctx.fillRect(x, 0, bw, 4); }
      if (S.members && S.members.has(p)) { ctx.fillStyle = MEMBER; ctx.fillRect(x, STEPS_H - 2, bw, 2); }
    }
    for (var v = 0; v < S.lanes.length; v++) {
      var info = S.lanes[v], top = viewTop(v), color = VIEW_COLORS[info.name] || "#777";
      ctx.fillStyle = "#6b6b70"; ctx.font = "11px system-ui, sans-serif";
      ctx.fillText(info.name, 4, top + 9);
      for (var i = 0; i < info.ids.length; i++) {
        var j = info.ids[i];
        if (S.last[j] < a || S.first[j] >= b) { continue; }
        var y = top + S.laneOf[j] * (LANE_H + LANE_GAP);
        var xa = Math.max(LABEL_W, stepX(S.first[j], x0));
        var xb = Math.min(w, stepX(S.last[j], x0) + Math.max(1, S.pps));
        var selected = j === S.selectedUnit;
        ctx.globalAlpha = selected ? 1 : 0.35;
        ctx.fillStyle = selected ? MEMBER : color;
        ctx.fillRect(xa, y, Math.max(1, xb - xa), LANE_H);
        ctx.globalAlpha = 1;
      }
    }
    if (S.selectedUnit >= 0) { // member ticks on the selected band
      var sj = S.selectedUnit, sy = viewTop(S.data.units.view[sj]) + S.laneOf[sj] * (LANE_H + LANE_GAP);
      ctx.fillStyle = "#ffffff";
      unitMembers(sj).forEach(function (q) {
        if (q >= a && q < b) { ctx.fillRect(stepX(q, x0), sy + 2, Math.max(1, Math.min(2, S.pps)), LANE_H - 4); }
      });
    }
    ctx.fillStyle = "#ffffff"; ctx.fillRect(0, STEPS_H, LABEL_W - 2, 0);
  }

  function drawOverview() {
    var canvas = $("overview"), ctx = canvas.getContext("2d"), dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    var w = canvas.width / dpr, h = canvas.height / dpr, st = S.data.steps;
    ctx.clearRect(0, 0, w, h);
    var scale = w / Math.max(1, S.n);
    for (var p = 0; p < S.n; p++) {
      ctx.fillStyle = ROLE_COLORS[st.roles[st.role[p]]] || "#8a8a8a";
      ctx.fillRect(p * scale, 10, Math.max(0.5, scale), 8);
    }
    ctx.fillStyle = MEMBER;
    if (S.members) { S.members.forEach(function (q) { ctx.fillRect(q * scale, 20, Math.max(1, scale), 8); }); }
    ctx.fillStyle = HIT;
    if (S.rankOf) { S.rankOf.forEach(function (_, q) { ctx.fillRect(q * scale, 0, Math.max(1.5, scale), 9); }); }
    var r = visibleRange();
    ctx.strokeStyle = "#1d1d1f"; ctx.lineWidth = 1;
    ctx.strokeRect(r[0] * scale + 0.5, 0.5, Math.max(2, (r[1] - r[0]) * scale), h - 1);
  }

  /* ---- the step list (virtualised: only the rows in sight exist) -------------- */

  function drawList() {
    var list = $("list"), spacer = $("list-spacer"), rowH = S.rowH;
    spacer.style.height = (S.n * rowH) + "px";
    var a = Math.max(0, Math.floor(list.scrollTop / rowH) - 10);
    var b = Math.min(S.n, Math.ceil((list.scrollTop + list.clientHeight) / rowH) + 10);
    clear(spacer);
    var st = S.data.steps;
    for (var p = a; p < b; p++) {
      var row = el("div", { "class": "row", "data-position": p });
      row.style.top = (p * rowH) + "px";
      if (S.members && S.members.has(p)) { row.classList.add("member"); }
      if (S.rankOf && S.rankOf.has(p)) { row.classList.add("retrieved"); }
      if (p === S.current) { row.classList.add("current"); }
      row.appendChild(el("span", { "class": "pos" }, p));
      row.appendChild(el("span", { "class": "role" }, st.roles[st.role[p]]));
      row.appendChild(el("span", { "class": "tool" }, st.tools[st.tool[p]]));
      row.appendChild(el("span", { "class": "cost" }, st.cost[p]));
      row.appendChild(document.createTextNode(st.text[p]));
      spacer.appendChild(row);
    }
  }

  function renderAll() {
    drawTimeline(); drawOverview(); drawList();
    if (!S.ready) {
      S.ready = true;
      window.osumemViewer.renderMs = performance.now() - started;
      window.osumemViewer.readyAt = performance.now();
      document.body.setAttribute("data-ready", "1");
    }
  }

  function scrollToStep(p) {
    var list = $("list");
    list.scrollTop = Math.max(0, p * S.rowH - list.clientHeight / 3);
    var sc = $("timeline-scroll"), w = $("timeline").clientWidth - LABEL_W;
    var x = p * S.pps;
    if (x < sc.scrollLeft || x > sc.scrollLeft + w) { sc.scrollLeft = Math.max(0, x - w / 3); }
  }

  /* ---- side panel: a step, a unit, an answer ------------------------------------- */

  function describe() {
    var d = S.data;
    $("facts").textContent = "namespace " + d.namespace + " · " + d.n + " steps · " +
      d.units.key.length + " units (" + d.method + ") · encoder " + d.encoder +
      (d.held_messages ? " · " + d.held_messages + " held messages" : "");
  }

  function unitList() {
    var box = $("units-list"); clear(box);
    var u = S.data.units, m = u.key.length, shown = Math.min(m, 400);
    if (!m) { box.appendChild(el("p", { "class": "muted" }, "This method builds no units.")); return; }
    var order = [];
    for (var j = 0; j < m; j++) { order.push(j); }
    order.sort(function (x, y) { return (unitMembers(y).length - unitMembers(x).length) || x - y; });
    var ul = el("ul");
    order.slice(0, shown).forEach(function (j) {
      var li = el("li", { "data-unit": j, "class": "mono" }, unitName(j) + " (" + unitMembers(j).length + ")");
      li.addEventListener("click", function () { selectUnit(j); });
      ul.appendChild(li);
    });
    box.appendChild(ul);
    if (m > shown) { box.appendChild(el("p", { "class": "muted" }, (m - shown) + " smaller units: click their bands.")); }
  }

  function selectUnit(j) {
    S.selectedUnit = j;
    S.members = j >= 0 ? new Set(unitMembers(j)) : null;
    var panel = $("unit-panel"); clear(panel);
    panel.setAttribute("data-unit", String(j));
    document.body.setAttribute("data-selected-unit", String(j));
    if (j >= 0) {
      var members = unitMembers(j);
      panel.appendChild(el("h2", null, "Unit " + unitName(j)));
      panel.appendChild(el("p", { "class": "muted" }, members.length + " members; view " +
        S.data.units.views[S.data.units.view[j]] + ", key " + S.data.units.key[j]));
      var ol = el("ul", { "id": "members" });
      members.slice(0, 500).forEach(function (p) {
        var li = el("li", { "data-position": p }, "step " + p + ": " + S.data.steps.text[p].slice(0, 80));
        li.addEventListener("click", function () { showStep(p); });
        ol.appendChild(li);
      });
      panel.appendChild(ol);
      if (members.length > 500) { panel.appendChild(el("p", { "class": "muted" }, "and " + (members.length - 500) + " more")); }
      scrollToStep(members[0]);
    }
    renderAll();
  }

  function showStep(p) {
    S.current = p;
    var st = S.data.steps, panel = $("step-panel"); clear(panel);
    panel.setAttribute("data-position", String(p));
    panel.appendChild(el("h2", null, "Step " + p + " · " + st.roles[st.role[p]] +
      (st.tools[st.tool[p]] ? " · " + st.tools[st.tool[p]] : "") + " · " + st.cost[p] + " tokens"));
    panel.appendChild(el("p", { "class": "muted" }, "source " + st.sources[st.source[p]] +
      (st.subgoals[st.subgoal[p]] ? " · subgoal " + st.subgoals[st.subgoal[p]] : "")));
    var cut = st.cut.indexOf(p) >= 0;
    panel.appendChild(el("pre", { "class": "text" }, st.text[p] + (cut ? " … (cut at " + st.text_chars + " characters)" : "")));
    var units = unitsOfStep(p);
    if (units.length) {
      var ul = el("ul");
      units.forEach(function (j) {
        var li = el("li", { "class": "mono", "data-unit": j }, unitName(j));
        li.addEventListener("click", function () { selectUnit(j); });
        ul.appendChild(li);
      });
      panel.appendChild(el("p", null, "In " + units.length + " unit(s):"));
      panel.appendChild(ul);
    }
    if (S.why && S.why[p]) {
      var w = S.why[p];
      panel.appendChild(el("p", null, "Retrieved at rank " + w.rank + ": cosine " + w.cosine.toFixed(3) +
        " (flat #" + w.flat_rank + ")" + (w.lexical === null ? "" : ", lexical " + w.lexical.toFixed(3)) +
        (w.stage ? ", " + w.stage : "") + (w.via ? ", via " + w.via.unit + " (coarse #" + w.via.coarse_rank + ")" : "")));
    }
    scrollToStep(p);
    renderAll();
  }

  function showAnswer(answer) {
    var box = $("result"); clear(box);
    var ex = answer.explanation || { steps: [], left_out: [], summary: {}, cost: answer.cost, budget: answer.budget, left: answer.budget - answer.cost };
    S.rankOf = new Map(); S.why = {};
    answer.steps.forEach(function (s, i) { S.rankOf.set(s.position, i); });
    (ex.steps || []).forEach(function (s) { S.why[s.position] = s; });
    box.setAttribute("data-positions", answer.steps.map(function (s) { return s.position; }).join(","));
    box.appendChild(el("h2", null, "Query: " + (answer.query === null ? "(a vector)" : answer.query)));
    box.appendChild(el("p", null, answer.steps.length + " steps, " + answer.cost + " of " + answer.budget +
      " tokens (" + ex.left + " left) · " + answer.method));
    var bar = el("div", { "class": "budget", "title": answer.cost + "/" + answer.budget + " tokens" });
    var fillBar = el("div"); fillBar.style.width = (100 * answer.cost / Math.max(1, answer.budget)) + "%";
    bar.appendChild(fillBar); box.appendChild(bar);
    var facts = Object.keys(ex.summary || {}).map(function (k) { return k + " " + ex.summary[k]; }).join(", ");
    if (facts) { box.appendChild(el("p", { "class": "muted" }, facts)); }
    var table = el("table", { "id": "retrieved" });
    var head = el("tr");
    ["rank", "step", "cost", "cosine", "flat", "lexical", "how", "via"].forEach(function (h) { head.appendChild(el("th", null, h)); });
    table.appendChild(head);
    answer.steps.forEach(function (s) {
      var w = S.why[s.position] || {};
      var tr = el("tr", { "data-position": s.position });
      [s.rank, s.position, s.cost, w.cosine === undefined ? "" : w.cosine.toFixed(3), w.flat_rank || "",
        w.lexical === null || w.lexical === undefined ? "–" : w.lexical.toFixed(3), w.stage || "",
        w.via ? w.via.unit + " #" + w.via.coarse_rank : ""].forEach(function (c) { tr.appendChild(el("td", null, c)); });
      tr.addEventListener("click", function () { showStep(s.position); });
      table.appendChild(tr);
    });
    box.appendChild(table);
    if (ex.left_out && ex.left_out.length) {
      box.appendChild(el("h2", null, "Left out (" + ex.candidates + ")"));
      var ul = el("ul", { "id": "left-out" });
      ex.left_out.forEach(function (o) {
        var li = el("li", { "data-position": o.position }, "step " + o.position + ": cosine " + o.cosine.toFixed(3) +
          " (flat #" + o.flat_rank + "), " + o.cost + " tokens: " +
          (o.reason === "budget" ? "more than the " + ex.left + " tokens left" : "would fit; the method chose others"));
        li.addEventListener("click", function () { showStep(o.position); });
        ul.appendChild(li);
      });
      box.appendChild(ul);
    }
    if (answer.steps.length) { scrollToStep(answer.steps[0].position); }
    renderAll();
  }

  /* ---- hit testing on the timeline -------------------------------------------------- */

  function unitAt(cx, cy) {
    var r = visibleRange(), x0 = r[2];
    var p = Math.floor((cx - LABEL_W + x0) / S.pps);
    for (var v = 0; v < S.lanes.length; v++) {
      var top = viewTop(v), info = S.lanes[v];
      if (cy < top || cy >= top + info.lanes * (LANE_H + LANE_GAP)) { continue; }
      var lane = Math.floor((cy - top) / (LANE_H + LANE_GAP)), best = -1;
      for (var i = 0; i < info.ids.length; i++) {
        var j = info.ids[i];
        if (S.laneOf[j] === lane && S.first[j] <= p && S.last[j] >= p &&
            (best < 0 || S.last[j] - S.first[j] < S.last[best] - S.first[best])) { best = j; }
      }
      return best;
    }
    return -2; // the step strip
  }

  function onTimelineClick(ev) {
    var rect = $("timeline-canvas").getBoundingClientRect();
    var cx = ev.clientX - rect.left, cy = ev.clientY - rect.top;
    if (cx < LABEL_W) { return; }
    var j = unitAt(cx, cy);
    if (j >= 0) { selectUnit(j); return; }
    if (j === -2) {
      var p = Math.floor((cx - LABEL_W + $("timeline-scroll").scrollLeft) / S.pps);
      if (p >= 0 && p < S.n) { showStep(p); }
    }
  }

  // Where the band of unit j is drawn, in page coordinates (scrolled into sight first).
  function bandCenter(j) {
    var sc = $("timeline-scroll"), w = $("timeline").clientWidth - LABEL_W;
    var span = Math.max(1, S.pps);
    var mid = S.first[j] + Math.floor((Math.min(S.last[j], S.first[j] + w / span / 2) - S.first[j]) / 2);
    var visible = visibleRange();
    if (mid < visible[0] || mid >= visible[1] - 1) { sc.scrollLeft = Math.max(0, S.first[j] * S.pps - 10); drawTimeline(); }
    var x0 = sc.scrollLeft, rect = $("timeline-canvas").getBoundingClientRect();
    var x = stepX(mid, x0) + Math.max(0.5, S.pps / 2);
    var y = viewTop(S.data.units.view[j]) + S.laneOf[j] * (LANE_H + LANE_GAP) + LANE_H / 2;
    return { x: rect.left + x, y: rect.top + y, unit_at_point: unitAt(x, y) };
  }

  /* ---- the server face: token, namespaces, queries ------------------------------------ */

  function api(method, path, body) {
    var headers = { "Accept": "application/json" };
    if (S.token) { headers.Authorization = "Bearer " + S.token; }
    if (body !== undefined) { headers["Content-Type"] = "application/json"; }
    return fetch(path, {
      method: method, headers: headers, credentials: "omit", cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (j) {
        if (!r.ok) { throw new Error((j.error && (j.error.type + ": " + j.error.message)) || ("HTTP " + r.status)); }
        return j;
      });
    });
  }
  function say(text) { $("message").textContent = text || ""; }

  function openNamespace(ns) {
    say("loading " + ns + " …");
    S.namespace = ns;
    return api("GET", "/v1/namespaces/" + encodeURIComponent(ns) + "/page").then(function (data) {
      say(""); load(data);
    }).catch(function (e) { say(e.message); });
  }

  function connect(ev) {
    ev.preventDefault();
    S.token = $("token").value || null;
    $("token").value = "";
    api("GET", "/v1/namespaces").then(function (j) {
      var sel = $("namespace"); clear(sel);
      j.namespaces.forEach(function (ns) { sel.appendChild(el("option", { value: ns }, ns)); });
      $("login").hidden = true; $("controls").hidden = false;
      if (j.namespaces.length) { return openNamespace(j.namespaces[0]); }
      say("the store holds no namespace yet");
    }).catch(function (e) { S.token = null; say(e.message); });
  }

  function ask(ev) {
    ev.preventDefault();
    var q = $("query").value, budget = parseInt($("budget").value, 10);
    if (!q.trim()) { return; }
    say("retrieving …");
    api("POST", "/v1/namespaces/" + encodeURIComponent(S.namespace) + "/retrieve",
        { query: q, budget: budget, explain: true })
      .then(function (answer) { say(""); showAnswer(answer); })
      .catch(function (e) { say(e.message); });
  }

  /* ---- start ---------------------------------------------------------------------- */

  function zoom(f) {
    var sc = $("timeline-scroll"), r = visibleRange(), mid = (r[0] + r[1]) / 2;
    S.pps = Math.max(0.02, Math.min(24, S.pps * f));
    layout();
    sc.scrollLeft = Math.max(0, mid * S.pps - ($("timeline").clientWidth - LABEL_W) / 2);
    renderAll();
  }

  window.osumemViewer = {
    state: S, selectUnit: selectUnit, showStep: showStep, bandCenter: bandCenter, unitAt: unitAt,
    highlighted: function () { return S.members ? Array.from(S.members).sort(function (a, b) { return a - b; }) : []; },
    retrieved: function () { return S.rankOf ? Array.from(S.rankOf.keys()) : []; },
    renderMs: null, readyAt: null
  };

  function start() {
    var frame = null;
    function later() { if (frame === null) { frame = requestAnimationFrame(function () { frame = null; if (S.data) { renderAll(); } }); } }
    $("list").addEventListener("scroll", function () { if (S.data) { drawList(); } });
    $("timeline-scroll").addEventListener("scroll", later);
    window.addEventListener("resize", function () { if (S.data) { layout(); later(); } });
    $("timeline-canvas").addEventListener("click", onTimelineClick);
    $("overview").addEventListener("click", function (ev) {
      var rect = ev.target.getBoundingClientRect(), p = Math.floor((ev.clientX - rect.left) / rect.width * S.n);
      scrollToStep(Math.max(0, Math.min(S.n - 1, p))); later();
    });
    $("zoom-in").addEventListener("click", function () { zoom(2); });
    $("zoom-out").addEventListener("click", function () { zoom(0.5); });
    var embedded = $("osumem-data");
    if (embedded) {
      $("login").hidden = true;
      load(JSON.parse(embedded.textContent));
      return;
    }
    S.server = true;
    $("login").addEventListener("submit", connect);
    $("controls").addEventListener("submit", ask);
    $("namespace").addEventListener("change", function () { openNamespace($("namespace").value); });
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); }
  else { start(); }
})();
