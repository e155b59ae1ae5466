/*
 * nsqadmin (nsq-rs) — the single-page UI.
 *
 * Plain browser JavaScript, no framework, no build step, nothing fetched
 * from outside nsqadmin. Pages are routed client-side (history API) under
 * BASE_PATH; each page loads its data from nsqadmin's /api, renders it, and
 * refreshes itself on the auto-refresh interval. Charts are inline SVG drawn
 * from /api/history (samples nsqadmin keeps in memory).
 *
 * Globals injected by the server: BASE_PATH, IS_ADMIN, NSQLOOKUPD,
 * USER_AGENT, VERSION, HISTORY_INTERVAL_MS (and nsqadmin's graphite ones).
 */
(function () {
  "use strict";

  var BASE = String(window.BASE_PATH || "/").replace(/\/+$/, "");
  var ADMIN = !!window.IS_ADMIN;
  var LOOKUPDS = window.NSQLOOKUPD || [];
  var HISTORY_MS = window.HISTORY_INTERVAL_MS || 5000;
  var REFRESH_KEY = "nsqadmin.refresh";
  var app = document.getElementById("app");
  var page = null;

  // ------------------------------------------------------------------
  // formatting
  // ------------------------------------------------------------------

  // Most strings (names, addresses) have nothing to escape: one test is
  // cheaper than five replaces, some 10,000 times on a 1,000-topic page.
  var SPECIAL = /[&<>"']/;
  function esc(v) {
    var s = String(v == null ? "" : v);
    if (!SPECIAL.test(s)) { return s; }
    return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // Counts are whole numbers, grouped here as en-US does ("1,234,567"):
  // building an Intl.NumberFormat took 40-70 ms of a fresh page, before
  // its first /api request was even sent (toLocaleString builds one per
  // call). Anything else (fractions, -0, beyond 2^53) goes to one shared
  // formatter, built when first needed.
  var NUMBER = null;
  function num(n) {
    if (n == null || isNaN(n)) { return "–"; }
    n = Number(n);
    if (!Number.isSafeInteger(n) || (n === 0 && 1 / n < 0)) {
      return (NUMBER || (NUMBER = new Intl.NumberFormat("en-US"))).format(n);
    }
    var s = String(n < 0 ? -n : n), i = s.length % 3 || 3, out = s.slice(0, i);
    for (; i < s.length; i += 3) { out += "," + s.slice(i, i + 3); }
    return n < 0 ? "-" + out : out;
  }

  function compact(n) {
    var a = Math.abs(n);
    if (a >= 1e9) { return trim(n / 1e9) + "G"; }
    if (a >= 1e6) { return trim(n / 1e6) + "M"; }
    if (a >= 1e4) { return trim(n / 1e3) + "k"; }
    return trim(n);
  }

  function trim(x) {
    var s = Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2);
    return s.indexOf(".") >= 0 ? s.replace(/\.?0+$/, "") : s;
  }

  function rateText(r) {
    if (r == null || isNaN(r)) { return "–"; }
    if (r === 0) { return "0"; }
    return r >= 100 ? num(Math.round(r)) : r.toFixed(1);
  }

  /* nanoseconds → 0ns, 12.3us, 4.5ms, 1.2s */
  function nanos(v) {
    if (v == null || isNaN(v)) { return "–"; }
    if (v >= 1e9) { return trim(v / 1e9) + "s"; }
    if (v >= 1e6) { return trim(v / 1e6) + "ms"; }
    if (v >= 1e3) { return trim(v / 1e3) + "us"; }
    return Math.round(v) + "ns";
  }

  /* nanoseconds → 45s, 3m12s, 2h5m, 3d4h */
  function since(ns) {
    var s = Math.max(0, Math.floor((ns || 0) / 1e9));
    if (s < 60) { return s + "s"; }
    if (s < 3600) { return Math.floor(s / 60) + "m" + (s % 60) + "s"; }
    if (s < 86400) { return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m"; }
    return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
  }

  function quantileLabel(q) {
    var p = Math.round(q * 10000) / 100;
    return esc(String(p)) + "<sup>th</sup>";
  }

  function clock(ms) {
    var d = new Date(ms);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  }

  function td(n, extra) {
    var cls = "num" + (n === 0 ? " zero" : "") + (extra ? " " + extra : "");
    return '<td class="' + cls + '">' + num(n) + "</td>";
  }

  function tdText(t, cls) {
    return '<td class="num' + (cls ? " " + cls : "") + '">' + t + "</td>";
  }

  /*
   * What each column word means, the same on every page (shown as the
   * header's tooltip). "Depth" is always one queue's own depth as nsqd
   * reports it; "Queued" adds a topic's channels to its own queue.
   */
  var WORDS = {
    queued: "messages waiting: the topic's own queue plus every channel's",
    topicDepth: "messages in the topic's own queue (not yet copied to its channels)",
    channelDepth: "messages waiting in the channel (not yet sent to a consumer)",
    memDisk: "depth split into memory + disk",
    inFlight: "sent to a consumer, not yet finished",
    deferred: "requeued with a delay or published deferred, not yet due",
    requeued: "messages put back by consumers (REQ) or by nsqd after a timeout",
    timedOut: "messages not finished within the message timeout",
    published: "messages published to the topic since nsqd started",
    publishRate: "messages published per second (nsqadmin's last samples)",
    received: "messages the channel received from its topic since nsqd started",
    receiveRate: "messages received per second (nsqadmin's last samples)",
    delivered: "messages sent to this consumer",
    finished: "messages this consumer finished (FIN)",
    consumers: "consumer connections over all of the topic's channels",
    connections: "consumer connections to the channel"
  };

  /* A header cell inside a table body (the node page's client rows). */
  function subTh(text, title) {
    return '<td class="num"' + (title ? ' title="' + esc(title) + '"' : "") + ">" + esc(text) + "</td>";
  }

  function th(text, title) {
    return '<th class="num"' + (title ? ' title="' + esc(title) + '"' : "") + ">" + esc(text) + "</th>";
  }

  /* Total published (last samples of every topic) and its rate. */
  function published(topics) {
    var total = 0, rate = null;
    Object.keys(topics).forEach(function (t) {
      total += last(topics[t].messages) || 0;
      var r = lastRate(topics[t]);
      if (r != null) { rate = (rate || 0) + r; }
    });
    return { total: total, rate: rate };
  }

  /* An admin action on one node's copy of a topic, labelled (not an icon). */
  function tombstoneButton(topic, node) {
    return '<button class="btn mini red" data-act="tombstone" data-topic="' + esc(topic) + '" data-node="' + esc(node) +
      '" title="Tombstone: delete topic ' + esc(topic) + " on " + esc(node) + ' and hide that nsqd as its producer on nsqlookupd (asks first)">Tombstone</button>';
  }

  function tombstoneQuestion(topic, node) {
    return "Tombstone topic " + topic + " on node " + node + "?\n\nThe topic and its channels are deleted on that nsqd, " +
      "and nsqlookupd stops listing that nsqd as a producer of the topic (for --tombstone-lifetime), so consumers stop connecting to it there.";
  }

  /*
   * The tables with a row (or a few) per topic: thousands of rows at 1,000
   * topics. One <table> of them made the browser style and measure every
   * cell before it could draw any (1.2-1.3 s for a node page of 1,000
   * topics, two thirds of it layout and style). So such a table is a box
   * (`rowsTable`) holding a header table and then a table per
   * ITEMS_PER_BODY items, each in a block the browser lays out only when
   * it nears the screen (content-visibility: auto; the rows are in the
   * page, so find-in-page and the scrollbar work as with one table). The
   * tables share one <colgroup> under table-layout: fixed, so the columns
   * line up without measuring any cell. `cols`: the width of each column
   * ("" for the ones that take what is left).
   */
  var ITEMS_PER_BODY = 20, FIRST_BODIES = 2, ROW_PX = 34;
  function colgroup(cols) {
    return "<colgroup>" + cols.map(function (w) { return w ? '<col style="width:' + w + '">' : "<col>"; }).join("") + "</colgroup>";
  }
  function rowsTable(id, cls, cols, headRow) {
    return '<div class="table-wrap"><div class="rows-table' + (cls ? " " + cls : "") + '" id="' + id + '"><table class="grid wide">' +
      colgroup(cols) + "<thead>" + headRow + "</thead></table></div></div>";
  }
  /*
   * Fills the box made by `rowsTable` with `items` (each the HTML of one
   * topic's rows): the first screenful at once, always drawn (class
   * "first"), the rest after that frame, drawn when scrolled near. Parsing
   * them all first delayed the first screen by their parse (200 ms at
   * 1,000 topics); and had the first blocks waited for the browser to find
   * them on screen, they would have waited for the rest's parse too. A
   * refresh replaces each block's rows in place, and a newer fill of the
   * same page cancels the rest of an older one.
   */
  function fillRows(p, box, cols, items) {
    var gen = (p.fillGen = (p.fillGen || 0) + 1);
    var group = colgroup(cols), blocks = [];
    for (var i = 0; i < items.length; i += ITEMS_PER_BODY) {
      var rows = items.slice(i, i + ITEMS_PER_BODY).join("");
      // Until it is first drawn, a block is as tall as its rows would be.
      var height = (rows.match(/<tr/g) || []).length * ROW_PX;
      blocks.push('<div class="rows' + (blocks.length < FIRST_BODIES ? " first" : "") + '" style="contain-intrinsic-size:auto ' +
        height + 'px"><table class="grid wide">' + group + "<tbody>" + rows + "</tbody></table></div>");
    }
    var tpl = document.createElement("template");
    function fill(from, to) {
      if (p.dead || p.fillGen !== gen || !box.isConnected) { return; }
      tpl.innerHTML = blocks.slice(from, to).join("");
      Array.prototype.slice.call(tpl.content.children).forEach(function (b, k) {
        // children[0] is the header table. A block already there keeps
        // its element, and with it the height the browser last drew it
        // at: the blocks above a reader who scrolled keep their place.
        var old = box.children[1 + from + k];
        if (!old) { box.appendChild(b); return; }
        old.setAttribute("style", b.getAttribute("style"));
        old.replaceChild(b.firstChild, old.firstChild);
      });
      if (to < blocks.length) {
        // After the next frame, so the first screen is drawn before the
        // rest is parsed (a timer alone can run before the frame).
        requestAnimationFrame(function () { setTimeout(function () { fill(to, blocks.length); }, 0); });
      } else {
        while (box.children.length > blocks.length + 1) { box.removeChild(box.lastChild); }
      }
    }
    fill(0, Math.min(FIRST_BODIES, blocks.length));
  }

  function memDisk(o) {
    return tdText(num(o.memory_depth) + " + " + num(o.backend_depth));
  }

  function sum(list, f) {
    var t = 0;
    (list || []).forEach(function (x) { t += f(x) || 0; });
    return t;
  }

  function last(arr) {
    return arr && arr.length ? arr[arr.length - 1] : null;
  }

  function lastRate(series) {
    if (!series || !series.rate) { return null; }
    for (var i = series.rate.length - 1; i >= 0 && i >= series.rate.length - 2; i--) {
      if (series.rate[i] != null) { return series.rate[i]; }
    }
    return null;
  }

  // ------------------------------------------------------------------
  // API
  // ------------------------------------------------------------------

  function api(method, path, body) {
    var ctl = window.AbortController ? new AbortController() : null;
    var timer = ctl ? setTimeout(function () { ctl.abort(); }, 20000) : null;
    return fetch(BASE + path, {
      method: method,
      headers: {
        "Accept": "application/vnd.nsq; version=1.0",
        "Content-Type": "application/json",
        "X-UserAgent": window.USER_AGENT || "nsqadmin"
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: ctl ? ctl.signal : undefined,
      credentials: "same-origin"
    }).then(function (resp) {
      return resp.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : {}; } catch (e) { data = null; }
        if (!resp.ok) {
          var msg = data && data.message ? data.message : (text || resp.status + " " + resp.statusText);
          var err = new Error(msg);
          err.status = resp.status;
          throw err;
        }
        return data || {};
      });
    }, function (e) {
      throw new Error(e && e.name === "AbortError" ? "request timed out" : "cannot reach nsqadmin (" + (e && e.message) + ")");
    }).finally(function () { if (timer) { clearTimeout(timer); } });
  }

  function enc(s) { return encodeURIComponent(s); }

  // ------------------------------------------------------------------
  // routing
  // ------------------------------------------------------------------

  function href(path) { return BASE + path; }

  function link(path, text, cls) {
    return '<a data-nav href="' + esc(href(path)) + '"' + (cls ? ' class="' + cls + '"' : "") + ">" + text + "</a>";
  }

  function topicLink(t) { return link("/topics/" + enc(t), esc(t)); }
  function nodeLink(n, text) { return link("/nodes/" + enc(n), esc(text || n)); }

  function currentPath() {
    var p = location.pathname;
    if (BASE && p.indexOf(BASE) === 0) { p = p.slice(BASE.length); }
    return p || "/";
  }

  function go(path) {
    history.pushState(null, "", href(path));
    render();
    window.scrollTo(0, 0);
  }

  var ROUTES = [
    [/^\/$/, "topics", topicsPage],
    [/^\/topics\/?$/, "topics", topicsPage],
    [/^\/topics\/([^/]+)\/([^/]+)\/?$/, "topics", channelPage],
    [/^\/topics\/([^/]+)\/?$/, "topics", topicPage],
    [/^\/nodes\/?$/, "nodes", nodesPage],
    [/^\/nodes\/([^/]+)\/?$/, "nodes", nodePage],
    [/^\/counter\/?$/, "counter", counterPage],
    [/^\/lookup\/?$/, "lookup", lookupPage],
    [/^\/replication\/?$/, "replication", replicationPage]
  ];

  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[data-nav]");
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) { return; }
    e.preventDefault();
    var path = a.pathname;
    if (BASE && path.indexOf(BASE) === 0) { path = path.slice(BASE.length); }
    go(path || "/");
  });
  window.addEventListener("popstate", render);
  document.getElementById("brand").setAttribute("href", href("/"));
  (function () {
    var navs = document.querySelectorAll("#nav a");
    for (var i = 0; i < navs.length; i++) { navs[i].setAttribute("href", href("/" + navs[i].getAttribute("data-section"))); }
  })();

  // ------------------------------------------------------------------
  // page lifecycle and auto-refresh
  // ------------------------------------------------------------------

  function refreshInterval() {
    var v = parseInt(localStorage.getItem(REFRESH_KEY), 10);
    return isNaN(v) ? 5000 : v;
  }

  var refreshSelect = document.getElementById("refresh-select");
  refreshSelect.value = String(refreshInterval());
  if (!refreshSelect.value) { refreshSelect.value = "5000"; }
  refreshSelect.addEventListener("change", function () {
    localStorage.setItem(REFRESH_KEY, refreshSelect.value);
    if (page) { schedule(page); }
  });

  var updated = document.getElementById("updated");
  function markUpdated(ok) {
    updated.textContent = (ok ? "updated " : "refresh failed ") + clock(Date.now());
    updated.className = "updated" + (ok ? "" : " stale");
  }

  function schedule(p) {
    clearTimeout(p.timer);
    var ms = refreshInterval();
    if (ms > 0 && !p.dead) {
      p.timer = setTimeout(function () { tick(p); }, ms);
    }
  }

  function tick(p) {
    if (p.dead) { return; }
    if (document.hidden) { schedule(p); return; }
    p.refresh().then(function () { schedule(p); });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && page && !page.dead && refreshInterval() > 0) { page.refresh(); }
  });

  function render() {
    if (page) { page.dead = true; clearTimeout(page.timer); }
    charts = {};
    var path = currentPath();
    var route = null, m = null;
    for (var i = 0; i < ROUTES.length && !route; i++) {
      m = ROUTES[i][0].exec(path);
      if (m) { route = ROUTES[i]; }
    }
    document.body.className = "";
    var navs = document.querySelectorAll("#nav a");
    for (var j = 0; j < navs.length; j++) {
      navs[j].classList.toggle("active", !!route && navs[j].getAttribute("data-section") === route[1]);
    }
    var p = { dead: false, timer: null, flash: null, loading: null };
    page = p;
    if (!route) {
      document.title = "nsqadmin";
      app.innerHTML = '<div class="banner banner-error">Page not found: ' + esc(path) + "</div>";
      return;
    }
    var params = m.slice(1).map(function (s) { return decodeURIComponent(s); });
    route[2](p, params);
    document.title = "nsqadmin" + (p.title ? " · " + p.title : "");
    p.refresh = function () {
      if (p.loading) { return p.loading; }
      p.loading = p.load().then(function () {
        markUpdated(true);
      }, function (err) {
        if (!p.dead) { p.error = err.message; showBanners(p); }
        markUpdated(false);
      }).then(function () { p.loading = null; cleanupCharts(); });
      return p.loading;
    };
    p.refresh().then(function () { schedule(p); });
  }

  /* The page's banner area: the load's warning or error, and the last action's outcome. */
  function showBanners(p) {
    var el = document.getElementById("banners");
    if (!el || p.dead) { return; }
    var html = "";
    if (p.flash) { html += '<div class="banner banner-' + p.flash.kind + '">' + esc(p.flash.text) + "</div>"; }
    if (p.error) { html += '<div class="banner banner-error">' + esc(p.error) + "</div>"; }
    if (p.warning) { html += '<div class="banner banner-warn">' + esc(p.warning) + "</div>"; }
    el.innerHTML = html;
  }

  /* Records a load's outcome message (nsqadmin's "WARNING: …"). */
  function loaded(p, messages) {
    p.error = null;
    p.warning = messages.filter(function (m) { return !!m; }).join("\n") || null;
    showBanners(p);
  }

  function flash(p, kind, text) {
    p.flash = { kind: kind, text: text };
    showBanners(p);
    clearTimeout(p.flashTimer);
    p.flashTimer = setTimeout(function () { p.flash = null; showBanners(p); }, 10000);
  }

  /* Confirms, performs an admin action through the API, reports, refreshes. */
  function act(p, question, method, path, body, done, button) {
    if (!window.confirm(question)) { return; }
    if (button) { button.disabled = true; }
    api(method, path, body).then(function (d) {
      if (d.message) { flash(p, "warn", d.message); } else { flash(p, "ok", "Done: " + question.replace(/\?[\s\S]*$/, "")); }
      if (done) { done(); } else { p.refresh(); }
    }, function (err) {
      flash(p, "error", err.message);
    }).then(function () { if (button) { button.disabled = false; } });
  }

  function bindActions(p, root, handlers) {
    root.onclick = function (e) {
      var b = e.target.closest && e.target.closest("[data-act]");
      if (!b || !root.contains(b)) { return; }
      var h = handlers[b.getAttribute("data-act")];
      if (h) { e.preventDefault(); h(b); }
    };
  }

  function crumbs(parts) {
    var html = '<div class="crumbs">';
    parts.forEach(function (c, i) {
      if (i > 0) { html += '<span class="sep">/</span>'; }
      html += c[1] ? link(c[1], esc(c[0])) : '<span class="here">' + esc(c[0]) + "</span>";
    });
    return html + "</div>";
  }

  function notice(title, text) {
    return '<div class="notice"><h4>' + esc(title) + "</h4>" + esc(text) + "</div>";
  }

  function card(label, value, sub) {
    return '<div class="card"><div class="label">' + esc(label) + '</div><div class="value">' + value + "</div>" +
      (sub ? '<div class="sub">' + sub + "</div>" : "") + "</div>";
  }

  // ------------------------------------------------------------------
  // charts (inline SVG)
  // ------------------------------------------------------------------

  var charts = {};
  var chartSeq = 0;
  var W = 640, H = 180, PL = 52, PR = 12, PT = 12, PB = 22;

  function niceMax(v) {
    if (!(v > 0)) { return 1; }
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10];
    for (var i = 0; i < steps.length; i++) { if (steps[i] * p >= v) { return steps[i] * p; } }
    return 10 * p;
  }

  /*
   * A time chart of `lines` ([{key, label, color}]) from a /api/history series.
   * The x axis spans the history window ending at the last sample.
   */
  function chart(title, series, lines, hist, fmt) {
    var id = "c" + (++chartSeq);
    var s = series || { ts: [] };
    var full = (hist && hist.window_ms) || 1800000;
    var end = (hist && hist.updated_ms) || last(s.ts) || Date.now();
    // Span what has been sampled (at least 5 minutes), up to the whole window.
    var first = s.ts && s.ts.length ? s.ts[0] : end;
    var win = Math.min(full, Math.max(300000, Math.ceil((end - first) / 300000) * 300000));
    var start = end - win;
    var max = 0;
    lines.forEach(function (l) {
      (s[l.key] || []).forEach(function (v) { if (v != null && v > max) { max = v; } });
    });
    max = niceMax(max);
    fmt = fmt || compact;
    function x(ts) { return PL + (ts - start) / win * (W - PL - PR); }
    function y(v) { return PT + (1 - v / max) * (H - PT - PB); }
    var svg = '<svg viewBox="0 0 ' + W + " " + H + '" role="img" aria-label="' + esc(title) + '">';
    [0, 0.5, 1].forEach(function (f) {
      var yy = y(max * f).toFixed(1);
      svg += '<line class="gridline" x1="' + PL + '" x2="' + (W - PR) + '" y1="' + yy + '" y2="' + yy + '"/>';
      svg += '<text class="axis" x="' + (PL - 6) + '" y="' + (Number(yy) + 3) + '" text-anchor="end">' + esc(fmt(max * f)) + "</text>";
    });
    var minutes = Math.round(win / 60000);
    var step = minutes <= 5 ? 1 : minutes <= 10 ? 2 : minutes <= 20 ? 5 : 10;
    for (var mk = 0; mk <= minutes; mk += step) {
      var xx = x(end - mk * 60000);
      var anchor = mk === 0 ? "end" : mk === minutes ? "start" : "middle";
      svg += '<text class="axis" x="' + xx.toFixed(1) + '" y="' + (H - 6) + '" text-anchor="' + anchor + '">' + (mk === 0 ? "now" : "-" + mk + "m") + "</text>";
    }
    if (!s.ts || s.ts.length === 0) {
      svg += '<text class="empty" x="' + (W / 2) + '" y="' + (H / 2) + '" text-anchor="middle">collecting samples (every ' + Math.round(HISTORY_MS / 1000) + "s)…</text>";
    }
    lines.forEach(function (l) {
      var vals = s[l.key] || [];
      var d = "", pen = false, pts = 0;
      for (var i = 0; i < vals.length; i++) {
        if (vals[i] == null || s.ts[i] < start) { pen = false; continue; }
        d += (pen ? "L" : "M") + x(s.ts[i]).toFixed(1) + "," + y(vals[i]).toFixed(1);
        pen = true;
        pts++;
      }
      if (pts === 1) {
        var lastTs = null, lastV = null;
        for (var k = vals.length - 1; k >= 0; k--) { if (vals[k] != null) { lastTs = s.ts[k]; lastV = vals[k]; break; } }
        svg += '<circle cx="' + x(lastTs).toFixed(1) + '" cy="' + y(lastV).toFixed(1) + '" r="2.5" fill="' + l.color + '"/>';
      }
      if (d) { svg += '<path d="' + d + '" fill="none" stroke="' + l.color + '" stroke-width="1.8" stroke-linejoin="round" vector-effect="non-scaling-stroke"/>'; }
    });
    svg += '<line class="hover-line" x1="0" x2="0" y1="' + PT + '" y2="' + (H - PB) + '" style="display:none"/>';
    svg += "</svg>";
    charts[id] = { series: s, lines: lines, x: x, fmt: fmt };
    var legend = lines.map(function (l) {
      var cur = last((s[l.key] || []).filter(function (v) { return v != null; }));
      return '<i style="background:' + l.color + '"></i>' + esc(l.label) + (cur != null ? " <b>" + esc(fmt(cur)) + "</b>" : "");
    }).join("");
    return '<div class="chart" data-chart="' + id + '"><div class="chart-head"><span class="chart-title">' + esc(title) +
      '</span><span class="legend">' + legend + "</span></div>" + svg + '<div class="tip"></div></div>';
  }

  function cleanupCharts() {
    for (var id in charts) {
      if (!document.querySelector('[data-chart="' + id + '"]')) { delete charts[id]; }
    }
  }

  document.addEventListener("mousemove", function (e) {
    var el = e.target.closest && e.target.closest(".chart");
    var shown = document.querySelectorAll(".chart .tip[data-on]");
    for (var i = 0; i < shown.length; i++) {
      if (!el || !el.contains(shown[i])) { hideTip(shown[i].parentNode); }
    }
    if (!el) { return; }
    var c = charts[el.getAttribute("data-chart")];
    var svg = el.querySelector("svg");
    if (!c || !svg || !c.series.ts || !c.series.ts.length) { return; }
    var r = svg.getBoundingClientRect();
    var mx = (e.clientX - r.left) / r.width * W;
    var best = -1, bestD = Infinity;
    for (var k = 0; k < c.series.ts.length; k++) {
      var d = Math.abs(c.x(c.series.ts[k]) - mx);
      if (d < bestD) { bestD = d; best = k; }
    }
    if (best < 0 || bestD > 40) { hideTip(el); return; }
    var xx = c.x(c.series.ts[best]);
    var line = svg.querySelector(".hover-line");
    line.setAttribute("x1", xx); line.setAttribute("x2", xx); line.style.display = "";
    var tip = el.querySelector(".tip");
    tip.innerHTML = esc(clock(c.series.ts[best])) + c.lines.map(function (l) {
      var v = (c.series[l.key] || [])[best];
      return "<br>" + esc(l.label) + ": <b>" + (v == null ? "–" : esc(c.fmt(v))) + "</b>";
    }).join("");
    tip.style.display = "block";
    tip.setAttribute("data-on", "1");
    var px = xx / W * r.width + (svg.getBoundingClientRect().left - el.getBoundingClientRect().left);
    tip.style.left = Math.min(px + 12, el.clientWidth - tip.offsetWidth - 6) + "px";
    tip.style.top = "34px";
  });

  function hideTip(el) {
    var tip = el.querySelector(".tip");
    if (tip) { tip.style.display = "none"; tip.removeAttribute("data-on"); }
    var line = el.querySelector(".hover-line");
    if (line) { line.style.display = "none"; }
  }

  /*
   * A tiny line of the last values of `key` (no axes). The index draws two
   * per topic, of up to 90 points: formatting both coordinates of every
   * point was 360,000 toFixed calls at 1,000 topics. The x of a point
   * depends only on the number of points, and a run of equal values (an
   * idle topic's zeros) has one y, so each is formatted once.
   */
  var sparkXs = {}, NO_SPARK = '<span class="muted small">–</span>';
  function spark(series, key, color) {
    var vals = series && series[key] ? series[key].filter(function (v) { return v != null; }) : [];
    if (vals.length < 2) { return NO_SPARK; }
    var w = 100, h = 22, max = Math.max.apply(null, vals), min = 0;
    var span = max - min || 1;
    var xs = sparkXs[vals.length];
    if (!xs) {
      xs = sparkXs[vals.length] = [];
      for (var i = 0; i < vals.length; i++) { xs.push((i / (vals.length - 1) * (w - 2) + 1).toFixed(1)); }
    }
    var pts = "", prev = null, y = "";
    for (var k = 0; k < vals.length; k++) {
      if (vals[k] !== prev) { prev = vals[k]; y = (h - 2 - (prev - min) / span * (h - 4)).toFixed(1); }
      pts += (k ? " " : "") + xs[k] + "," + y;
    }
    return '<svg class="spark" width="' + w + '" height="' + h + '" viewBox="0 0 ' + w + " " + h + '"><polyline points="' + pts +
      '" fill="none" stroke="' + color + '" stroke-width="1.5"/></svg>';
  }

  function historyOrNull(path) {
    return api("GET", path).then(null, function () { return null; });
  }

  // ------------------------------------------------------------------
  // E2E latency columns
  // ------------------------------------------------------------------

  function quantiles(list) {
    var qs = [];
    (list || []).forEach(function (o) {
      var e = o && o.e2e_processing_latency;
      ((e && e.percentiles) || []).forEach(function (p) {
        if (qs.indexOf(p.quantile) < 0) { qs.push(p.quantile); }
      });
    });
    return qs.sort(function (a, b) { return b - a; });
  }

  function e2eCells(o, qs) {
    var ps = (o && o.e2e_processing_latency && o.e2e_processing_latency.percentiles) || [];
    return qs.map(function (q) {
      var p = null;
      ps.forEach(function (x) { if (x.quantile === q) { p = x; } });
      var v = p ? (p.value != null ? p.value : p.average) : null;
      var title = p && p.max != null ? ' title="min ' + esc(nanos(p.min)) + ", max " + esc(nanos(p.max)) + ", avg " + esc(nanos(p.average)) + '"' : "";
      return '<td class="num"' + title + ">" + nanos(v) + "</td>";
    }).join("");
  }

  function e2eHeads(qs) {
    return qs.map(function (q) { return '<th class="num">' + quantileLabel(q) + "</th>"; }).join("");
  }

  function pausedLabel(o) {
    return o && o.paused ? ' <span class="label-b orange">paused</span>' : "";
  }

  // ------------------------------------------------------------------
  // Topics (/ and /topics)
  // ------------------------------------------------------------------

  // Topic (what is left), five numbers, the rate, two sparklines (100px).
  var TOPIC_COLS = ["", "9%", "9%", "9%", "10%", "10%", "9%", "124px", "124px"];
  function topicsPage(p) {
    p.title = "Topics";
    p.filter = localStorage.getItem("nsqadmin.filter") || "";
    app.innerHTML = '<div id="banners"></div><div class="cards" id="cards"></div>' +
      '<div class="title-row"><h1>Topics</h1><input type="text" id="filter" class="filter" placeholder="filter topics" value="' + esc(p.filter) + '"></div>' +
      '<div id="content"><p class="muted">Loading…</p></div>';
    var input = document.getElementById("filter");
    input.addEventListener("input", function () {
      p.filter = input.value;
      localStorage.setItem("nsqadmin.filter", p.filter);
      draw();
    });

    p.load = function () {
      return Promise.all([api("GET", "/api/topics"), historyOrNull("/api/history?points=90")]).then(function (r) {
        if (p.dead) { return; }
        p.topics = r[0].topics || [];
        p.hist = r[1];
        loaded(p, [r[0].message]);
        draw();
      });
    };

    function draw() {
      var hist = p.hist || { topics: {} };
      var cl = hist.cluster || {};
      var pub = published(hist.topics || {});
      document.getElementById("cards").innerHTML =
        card("Topics", num(p.topics.length)) +
        card("Queued", num(last(cl.depth)), "waiting in topics and channels") +
        card("In-Flight", num(last(cl.in_flight)), "sent, not yet finished") +
        card("Published", rateText(pub.rate) + '<span class="small muted"> msg/s</span>', num(pub.total) + " messages so far") +
        card("Consumers", num(last(cl.clients)), "connections");
      var content = document.getElementById("content");
      if (!p.topics.length) {
        content.innerHTML = notice("Notice", "No Topics Found");
        return;
      }
      var f = (p.filter || "").toLowerCase();
      var shown = p.topics.filter(function (t) { return !f || t.toLowerCase().indexOf(f) >= 0; });
      var groups = shown.map(function (t) {
        var s = hist.topics && hist.topics[t];
        var depth = s ? last(s.depth) : null;
        var depthSpark = spark(s, "depth", "var(--c1)"), rateSpark = spark(s, "rate", "var(--c3)");
        // base.css makes the text cells of a row with a sparkline as tall
        // as it, so that they are laid out once.
        var tall = depthSpark !== NO_SPARK || rateSpark !== NO_SPARK;
        return '<tr data-topic="' + esc(t) + '"' + (tall ? ' class="spark-row"' : "") + '><td title="' + esc(t) + '">' + topicLink(t) + "</td>" +
          (s ? td(depth, depth > 0 ? "hot" : "") + td(last(s.in_flight)) + td(last(s.deferred)) + td(last(s.messages)) +
            tdText(rateText(lastRate(s))) + td(last(s.clients)) :
            '<td class="num muted" colspan="6" title="nsqadmin samples every nsqd every ' + Math.round(HISTORY_MS / 1000) + 's; a topic no nsqd has (only registered on nsqlookupd) has no numbers">no stats (yet)</td>') +
          "<td>" + depthSpark + "</td><td>" + rateSpark + "</td></tr>";
      });
      if (!groups.length) { groups = ['<tr><td colspan="9" class="muted">no topic matches the filter</td></tr>']; }
      var note = '<p class="muted small" id="topics-note">Queued, in-flight and rates are sampled every ' + Math.round(HISTORY_MS / 1000) + "s by nsqadmin" +
        (hist.updated_ms ? " (last sample " + clock(hist.updated_ms) + ")" : "") + "; open a topic for exact per-node numbers.</p>";
      var box = document.getElementById("topics-table");
      if (!box) {
        content.innerHTML = rowsTable("topics-table", "", TOPIC_COLS, "<tr>" +
          "<th>Topic</th>" + th("Queued", WORDS.queued) + th("In-Flight", WORDS.inFlight) + th("Deferred", WORDS.deferred) +
          th("Published", WORDS.published) + th("Publish rate (msg/s)", WORDS.publishRate) + th("Consumers", WORDS.consumers) +
          "<th>Queued, 30 min</th><th>Publish rate, 30 min</th></tr>") + note;
        box = document.getElementById("topics-table");
      } else {
        document.getElementById("topics-note").outerHTML = note;
      }
      fillRows(p, box, TOPIC_COLS, groups);
    }
  }

  // ------------------------------------------------------------------
  // nsq-rs settings of a topic or channel (limits, dead letters)
  // ------------------------------------------------------------------

  /* The settings panel: what is set now (every refresh) and, for admins, a
     form drawn once per save, so a refresh never overwrites what is being
     typed. `fields`: [key, label, help, current text, input value, kind]. */
  function settingsPanel(p, el, what, path, fields, counters) {
    var cur = '<table class="grid" id="' + what + '-settings"><tbody>' + fields.map(function (f) {
      return '<tr data-setting="' + f[0] + '"><th title="' + esc(f[2]) + '">' + esc(f[1]) + "</th><td>" + f[3] + "</td></tr>";
    }).join("") + counters.map(function (c) {
      return '<tr data-counter="' + c[0] + '"><th title="' + esc(c[2]) + '">' + esc(c[1]) + '</th><td class="num">' + num(c[3]) + "</td></tr>";
    }).join("") + "</tbody></table>";
    var current = document.getElementById(what + "-settings-now");
    if (current) { current.innerHTML = cur; }
    if (!ADMIN || p.formDrawn) { return; }
    p.formDrawn = true;
    var form = '<form class="settings-form" id="' + what + '-config" onsubmit="return false">' + fields.map(function (f) {
      var input = f[5] === "policy" ?
        '<select name="' + f[0] + '"><option value="reject"' + (f[4] !== "drop-oldest" ? " selected" : "") + '>reject publishes</option>' +
          '<option value="drop-oldest"' + (f[4] === "drop-oldest" ? " selected" : "") + ">drop the oldest</option></select>" :
        '<input name="' + f[0] + '" value="' + esc(f[4]) + '" placeholder="' + esc(f[5]) + '">';
      return '<label title="' + esc(f[2]) + '"><span>' + esc(f[1]) + "</span>" + input + "</label>";
    }).join("") + '<button type="button" class="btn" data-act="save-config">Save settings</button></form>';
    el.innerHTML = '<h2>Settings <span class="muted small">(nsq-rs)</span></h2><div class="settings">' +
      '<div id="' + what + '-settings-now">' + cur + "</div>" + form + "</div>";
    bindActions(p, el, {
      "save-config": function (b) {
        var body = { action: "config" };
        // only what was changed: a setting shown as it is in force (a
        // channel's max age may be its topic's) is not made its own
        Array.prototype.forEach.call(el.querySelectorAll("input, select"), function (i) {
          if (i.value.trim() !== (i.getAttribute("data-was") || "").trim()) { body[i.name] = i.value.trim(); }
        });
        act(p, "Save the settings of " + what + " " + p.title + " on every nsqd that has it?", "POST", path, body, function () {
          p.formDrawn = false; p.refresh();
        }, b);
      }
    });
  }

  function limitText(o) {
    return o.max_depth ? num(o.max_depth) : '<span class="muted">unlimited</span>';
  }

  function policyText(o) {
    return o.max_depth_policy === "drop-oldest" ? "drop the oldest" : "reject publishes";
  }

  var LIMIT_WORDS = {
    maxDepth: "most messages waiting (depth: memory + disk); 0 = unlimited, NSQ's behaviour",
    policy: "what a full queue does with a new message: refuse the publish (E_PUB_FAILED, HTTP 503), or drop the oldest waiting one",
    dropped: "messages the drop-oldest policy dropped",
    memQueue: "messages kept in memory before the rest goes to disk, for the topic and its channels; empty = --mem-queue-size",
    maxAttempts: "deliveries a message gets at most; the next would go to the dead-letter topic; 0 = unlimited, NSQ's behaviour",
    deadTopic: "where messages past max attempts go; empty = <topic>.<channel>.dead",
    deadCount: "messages moved to the dead-letter topic",
    maxAge: "messages older than this (from their publish time) expire undelivered: dropped, or sent to the dead-letter topic when the channel has one; Go's duration (90s, 1h); 0 or empty = never, NSQ's behaviour",
    channelMaxAge: "as the topic's max age, for this channel only: the shorter of the two applies; empty = the topic's",
    expired: "messages that expired past their max age",
    retention: "how long and/or how much of the topic's finished messages its replication group keeps, so a channel can replay them: a duration (24h), a size (10GiB), both (24h,10GiB); 0 = none, NSQ's behaviour",
    retained: "messages the group's log keeps of the topic (finished or not), about"
  };

  function ageText(o) {
    return o.max_age ? esc(o.max_age) : '<span class="muted">never</span>';
  }

  function topicSettings(p, t) {
    var rows = [
      ["mem_queue_size", "Memory queue size", LIMIT_WORDS.memQueue,
        t.mem_queue_size != null ? num(t.mem_queue_size) : '<span class="muted">--mem-queue-size</span>',
        t.mem_queue_size != null ? String(t.mem_queue_size) : "", "--mem-queue-size"],
      ["max_depth", "Max depth", LIMIT_WORDS.maxDepth, limitText(t), String(t.max_depth || 0), "0"],
      ["max_depth_policy", "When full", LIMIT_WORDS.policy, policyText(t), t.max_depth_policy || "reject", "policy"],
      ["max_age", "Max age", LIMIT_WORDS.maxAge, ageText(t), t.max_age || "", "never"]
    ];
    var counts = [
      ["dropped_count", "Dropped", LIMIT_WORDS.dropped, t.dropped_count || 0],
      ["expired_count", "Expired", LIMIT_WORDS.expired, t.expired_count || 0]
    ];
    // nsq-rs replay: a replicated topic's retention, its group's
    var r = t.replication;
    if (r) {
      rows.push(["retention", "Retention", LIMIT_WORDS.retention,
        r.retention ? esc(r.retention) : '<span class="muted">none</span>', r.retention || "", "0"]);
      counts.push(["retained_messages", "Retained", LIMIT_WORDS.retained, r.retained_messages || 0]);
    }
    settingsPanel(p, document.getElementById("settings"), "topic", "/api/topics/" + enc(t.topic_name), rows, counts);
  }

  function channelSettings(p, c) {
    var dead = c.dead_letter_topic || (c.topic_name + "." + c.channel_name + ".dead");
    settingsPanel(p, document.getElementById("settings"), "channel", "/api/topics/" + enc(c.topic_name) + "/" + enc(c.channel_name), [
      ["max_attempts", "Max attempts", LIMIT_WORDS.maxAttempts,
        c.max_attempts ? num(c.max_attempts) : '<span class="muted">unlimited</span>', String(c.max_attempts || 0), "0"],
      ["dead_letter_topic", "Dead-letter topic", LIMIT_WORDS.deadTopic,
        c.max_attempts ? topicLink(dead) : '<span class="muted">' + esc(dead) + " (when max attempts is set)</span>",
        c.dead_letter_topic && c.dead_letter_topic !== c.topic_name + "." + c.channel_name + ".dead" ? c.dead_letter_topic : "",
        c.topic_name + "." + c.channel_name + ".dead"],
      ["max_depth", "Max depth", LIMIT_WORDS.maxDepth, limitText(c), String(c.max_depth || 0), "0"],
      ["max_depth_policy", "When full", LIMIT_WORDS.policy, policyText(c), c.max_depth_policy || "reject", "policy"],
      ["max_age", "Max age", LIMIT_WORDS.channelMaxAge, ageText(c), c.max_age || "", "the topic's"]
    ], [
      ["dead_letter_count", "Dead letters", LIMIT_WORDS.deadCount, c.dead_letter_count || 0],
      ["dropped_count", "Dropped", LIMIT_WORDS.dropped, c.dropped_count || 0],
      ["expired_count", "Expired", LIMIT_WORDS.expired, c.expired_count || 0]
    ]);
  }

  // ------------------------------------------------------------------
  // Topic (/topics/:topic)
  // ------------------------------------------------------------------

  function topicPage(p, params) {
    var topic = params[0];
    p.title = topic;
    var tpath = "/api/topics/" + enc(topic);
    app.innerHTML = crumbs([["Streams", "/topics"], [topic]]) +
      '<div class="title-row"><div class="what">Topic: <b>' + esc(topic) + '</b><span id="paused"></span></div></div>' +
      '<div id="banners"></div>' +
      (ADMIN ? '<div class="actions" id="actions">' +
        '<button class="btn orange" data-act="empty">Empty Queue</button>' +
        '<button class="btn red" data-act="delete">Delete Topic</button>' +
        '<button class="btn" data-act="pause" id="pause-btn">Pause Topic</button></div>' : "") +
      '<div class="charts" id="charts"></div><div id="content"><p class="muted">Loading…</p></div><div id="settings"></div>';

    if (ADMIN) {
      bindActions(p, document.getElementById("actions"), {
        empty: function (b) { act(p, "Empty all messages queued in topic " + topic + "?", "POST", tpath, { action: "empty" }, null, b); },
        "delete": function (b) { act(p, "Delete topic " + topic + " and all its channels?", "DELETE", tpath, undefined, function () { go("/topics"); }, b); },
        pause: function (b) {
          var paused = p.data && p.data.paused;
          act(p, (paused ? "Unpause" : "Pause") + " topic " + topic + "?", "POST", tpath, { action: paused ? "unpause" : "pause" }, null, b);
        }
      });
    }
    bindActions(p, document.getElementById("content"), {
      tombstone: function (b) {
        var node = b.getAttribute("data-node");
        act(p, tombstoneQuestion(topic, node), "DELETE", "/api/nodes/" + enc(node), { topic: topic }, null, b);
      }
    });

    p.load = function () {
      return Promise.all([
        api("GET", tpath).then(null, function (e) { return { failed: e }; }),
        historyOrNull("/api/history/topics/" + enc(topic) + "?points=240")
      ]).then(function (r) {
        if (p.dead) { return; }
        p.hist = r[1];
        drawCharts(p);
        if (r[0].failed) { throw r[0].failed; }
        p.data = r[0];
        loaded(p, [r[0].message]);
        draw();
      });
    };

    function drawCharts(p) {
      var h = p.hist || {};
      document.getElementById("charts").innerHTML =
        chart("Queued (topic + channels)", h.total, [{ key: "depth", label: "queued", color: "var(--c1)" }, { key: "in_flight", label: "in-flight", color: "var(--c2)" }], h) +
        chart("Publish rate (msg/s)", h.total, [{ key: "rate", label: "published", color: "var(--c3)" }], h);
    }

    function draw() {
      var t = p.data;
      document.getElementById("paused").innerHTML = pausedLabel(t);
      var pb = document.getElementById("pause-btn");
      if (pb) { pb.textContent = t.paused ? "UnPause Topic" : "Pause Topic"; pb.className = "btn" + (t.paused ? " green" : ""); }
      var nodes = t.nodes || [];
      var channels = (t.channels || []).slice().sort(function (a, b) { return a.channel_name < b.channel_name ? -1 : 1; });
      var qs = quantiles(nodes.concat([t]).concat(channels));
      var hn = (p.hist && p.hist.nodes) || {};
      var hc = (p.hist && p.hist.channels) || {};
      var e2eGroup = qs.length ? '<th colspan="' + qs.length + '">E2E Processing Latency</th>' : "";

      var html = "<h2>Topic Message Queue</h2>";
      if (!nodes.length) {
        html += notice("Notice", "No nsqd currently has this topic");
      } else {
        html += '<div class="table-wrap"><table class="grid wide" id="topic-nodes"><thead>' +
          (qs.length ? '<tr class="group"><th colspan="9"></th>' + e2eGroup + (ADMIN ? "<th></th>" : "") + "</tr>" : "") +
          "<tr><th>NSQd Host</th>" + th("Depth", WORDS.topicDepth) + th("Memory + Disk", WORDS.memDisk) + th("In-Flight", WORDS.inFlight) + th("Deferred", WORDS.deferred) +
          th("Published", WORDS.published) + th("Publish rate (msg/s)", WORDS.publishRate) + th("Channels") + th("Consumers", WORDS.consumers) + e2eHeads(qs) +
          (ADMIN ? "<th>Action</th>" : "") + "</tr></thead><tbody>";
        nodes.forEach(function (n) {
          var inflight = sum(n.channels, function (c) { return c.in_flight_count; });
          var deferred = sum(n.channels, function (c) { return c.deferred_count; });
          var clients = sum(n.channels, function (c) { return c.client_count; });
          html += '<tr data-node="' + esc(n.node) + '"><td>' +
            esc(n.hostname) + " (" + nodeLink(n.node) + ")" + pausedLabel(n) + "</td>" +
            td(n.depth) + memDisk(n) + td(inflight) + td(deferred) + td(n.message_count) +
            tdText(rateText(lastRate(hn[n.node]))) + td((n.channels || []).length) + td(clients) + e2eCells(n, qs) +
            (ADMIN ? "<td>" + tombstoneButton(topic, n.node) + "</td>" : "") + "</tr>";
        });
        html += '<tr class="total"><td>Total:</td>' + td(t.depth) + memDisk(t) +
          td(sum(channels, function (c) { return c.in_flight_count; })) + td(sum(channels, function (c) { return c.deferred_count; })) +
          td(t.message_count) + tdText(rateText(lastRate(p.hist && p.hist.total))) + td(channels.length) +
          td(sum(channels, function (c) { return c.client_count; })) + e2eCells(t, qs) + (ADMIN ? "<td></td>" : "") + "</tr></tbody></table></div>";
      }

      html += "<h2>Channel Message Queues</h2>";
      if (!channels.length) {
        html += notice("Notice", "No channels exist for this topic");
      } else {
        html += '<div class="table-wrap"><table class="grid wide" id="topic-channels"><thead>' +
          (qs.length ? '<tr class="group"><th colspan="12"></th>' + e2eGroup + "</tr>" : "") +
          "<tr><th>Channel</th>" + th("Depth", WORDS.channelDepth) + th("Memory + Disk", WORDS.memDisk) + th("In-Flight", WORDS.inFlight) + th("Deferred", WORDS.deferred) +
          th("Requeued", WORDS.requeued) + th("Timed Out", WORDS.timedOut) + th("Received", WORDS.received) + th("Receive rate (msg/s)", WORDS.receiveRate) +
          th("Connections", WORDS.connections) + "<th>Depth, 30 min</th><th>Receive rate, 30 min</th>" + e2eHeads(qs) + "</tr></thead><tbody>";
        channels.forEach(function (c) {
          var s = hc[c.channel_name];
          html += '<tr data-channel="' + esc(c.channel_name) + '"><td><b>' + link("/topics/" + enc(topic) + "/" + enc(c.channel_name), esc(c.channel_name)) + "</b>" + pausedLabel(c) + "</td>" +
            td(c.depth, c.depth > 0 ? "hot" : "") + memDisk(c) + td(c.in_flight_count) + td(c.deferred_count) + td(c.requeue_count) +
            td(c.timeout_count) + td(c.message_count) + tdText(rateText(lastRate(s))) + td(c.client_count) +
            "<td>" + spark(s, "depth", "var(--c1)") + "</td><td>" + spark(s, "rate", "var(--c3)") + "</td>" + e2eCells(c, qs) + "</tr>";
        });
        html += "</tbody></table></div>";
      }
      html += replicationSection(t);
      document.getElementById("content").innerHTML = html;
      topicSettings(p, t);
    }
  }

  /* nsq-rs replicated topics: the group as its leader reports it (nothing
     for an unreplicated topic). Lag is known on the leader alone; the
     totals above are the leader's, so a message every member holds counts once. */
  function replicationSection(t) {
    var r = t.replication;
    if (!r) { return ""; }
    var leader = r.leader == null ? '<span class="muted">none (election under way)</span>' :
      "node " + esc(r.leader) + (r.leader_address ? " (" + esc(r.leader_address) + ")" : "");
    var known = r.is_leader ? "" : '<p class="muted">No member reports leading the group: lags are unknown and the totals are summed over members.</p>';
    return '<h2>Replication <span class="muted small">(nsq-rs)</span></h2>' +
      '<table class="grid" id="topic-replication"><tbody>' +
      '<tr><th title="members that hold the topic">Replicas</th><td class="num">' + num(t.replicas || (r.replicas || []).length) + "</td></tr>" +
      '<tr><th title="the member that takes publishes and serves consumers">Leader</th><td data-leader="' + esc(r.leader == null ? "" : r.leader) + '">' + leader + "</td></tr>" +
      '<tr><th title="Raft group the topic is placed in">Group</th><td class="num">' + esc(r.group) + "</td></tr>" +
      '<tr><th title="last index in the leader\'s log / last committed on a majority">Log, committed</th><td class="num">' +
        (r.last_log_index == null ? "-" : num(r.last_log_index)) + ", " + (r.committed_index == null ? "-" : num(r.committed_index)) + "</td></tr>" +
      '<tr><th title="messages committed and not yet finished: held for channels to come plus the most any channel has not finished (FINs reach the log in batches)">Committed, not finished</th><td class="num" id="topic-unfinished">' +
        num(r.unfinished || 0) + "</td></tr>" +
      '<tr><th title="messages this node put back when it gained the group: committed, not finished, possibly already delivered by the old leader">Put back at failover</th><td class="num" id="topic-put-back">' +
        num(r.put_back || 0) + "</td></tr>" +
      "</tbody></table>" +
      '<table class="grid" id="topic-replicas"><thead><tr><th>Node</th><th>Role</th>' +
      th("Matched", "last log index the leader knows this replica has") + th("Lag", "entries behind the leader's last log index") +
      "</tr></thead><tbody>" + (r.replicas || []).map(function (x) {
        return '<tr data-replica="' + esc(x.node_id) + '"><td>node ' + esc(x.node_id) + "</td><td>" + (x.node_id === r.leader ? "leader" : "follower") + "</td>" +
          tdText(x.matched_index == null ? "-" : num(x.matched_index)) + tdText(x.lag == null ? "-" : num(x.lag)) + "</tr>";
      }).join("") + "</tbody></table>" + known;
  }

  // ------------------------------------------------------------------
  // Channel (/topics/:topic/:channel)
  // ------------------------------------------------------------------

  /* Client rows; `nested` = node page layout (indented, `tail` cells after). */
  function clientRows(clients, withNode, nested, tail) {
    return clients.map(function (c) {
      var host = esc(c.hostname || c.remote_address);
      if (c.client_id && c.client_id !== c.hostname) { host += ' <span class="muted">(' + esc(c.client_id) + ")</span>"; }
      var attrs = [];
      if (c.sample_rate > 0) { attrs.push('<span class="label-b grey">sampled ' + esc(c.sample_rate) + "%</span>"); }
      if (c.tls) { attrs.push('<span class="label-b green" title="' + esc((c.tls_version || "") + " " + (c.tls_cipher_suite || "")) + '">TLS</span>'); }
      if (c.deflate) { attrs.push('<span class="label-b grey">Deflate</span>'); }
      if (c.snappy) { attrs.push('<span class="label-b grey">Snappy</span>'); }
      if (c.authed) {
        var who = esc(c.auth_identity || "authed");
        attrs.push(c.auth_identity_url ? '<a class="label-b" href="' + esc(c.auth_identity_url) + '">' + who + "</a>" : '<span class="label-b">' + who + "</span>");
      }
      if (c.topology_region || c.topology_zone) { attrs.push('<span class="label-b grey">' + esc([c.topology_region, c.topology_zone].filter(Boolean).join("/")) + "</span>"); }
      return '<tr class="client" data-client="' + esc(c.remote_address) + '"><td' + (nested ? ' class="indent2"' : "") + ' title="' + esc(c.remote_address) + '">' + host + "</td>" +
        '<td><span class="mono">' + esc(c.user_agent || "") + '</span> <span class="muted small">' + esc(c.version) + "</span></td>" +
        "<td>" + (attrs.join(" ") || '<span class="muted">–</span>') + "</td>" +
        (withNode ? "<td>" + nodeLink(c.node) + "</td>" : "") +
        td(c.in_flight_count) + td(c.ready_count) + td(c.finish_count) + td(c.requeue_count) +
        td(c.message_count) + tdText(since(c.connected)) + (tail || "") + "</tr>";
    }).join("");
  }

  function clientHead(withNode) {
    return '<tr><th>Client Host</th><th>User-Agent</th><th>Attributes</th>' + (withNode ? "<th>NSQd Host</th>" : "") +
      th("In-Flight", WORDS.inFlight) + th("Ready Count", "messages nsqd may send now (the client's RDY)") + th("Finished", WORDS.finished) + th("Requeued", WORDS.requeued) +
      th("Delivered", WORDS.delivered) + th("Connected", "time since the client connected") + "</tr>";
  }

  function channelPage(p, params) {
    var topic = params[0], channel = params[1];
    p.title = topic + " / " + channel;
    var cpath = "/api/topics/" + enc(topic) + "/" + enc(channel);
    app.innerHTML = crumbs([["Streams", "/topics"], [topic, "/topics/" + enc(topic)], [channel]]) +
      '<div class="title-row"><div class="what">Topic: <b>' + esc(topic) + '</b> &nbsp; Channel: <b>' + esc(channel) + '</b><span id="paused"></span></div></div>' +
      '<div id="banners"></div>' +
      (ADMIN ? '<div class="actions" id="actions">' +
        '<button class="btn orange" data-act="empty">Empty Queue</button>' +
        '<button class="btn red" data-act="delete">Delete Channel</button>' +
        '<button class="btn" data-act="pause" id="pause-btn">Pause Channel</button>' +
        '<button class="btn" data-act="replay" id="replay-btn" title="replicated topics with a retention: deliver again every retained message from a time">Replay from…</button></div>' : "") +
      '<div class="charts" id="charts"></div><div id="content"><p class="muted">Loading…</p></div><div id="settings"></div>';

    if (ADMIN) {
      bindActions(p, document.getElementById("actions"), {
        empty: function (b) { act(p, "Empty all messages queued in channel " + channel + " of topic " + topic + "?", "POST", cpath, { action: "empty" }, null, b); },
        "delete": function (b) { act(p, "Delete channel " + channel + " of topic " + topic + "?", "DELETE", cpath, undefined, function () { go("/topics/" + enc(topic)); }, b); },
        pause: function (b) {
          var paused = p.data && p.data.paused;
          act(p, (paused ? "Unpause" : "Pause") + " channel " + channel + " of topic " + topic + "?", "POST", cpath, { action: paused ? "unpause" : "pause" }, null, b);
        },
        /* nsq-rs replay: the channel goes back (or on) through its topic's
           replication group; every retained message from there is delivered again. */
        replay: function (b) {
          var to = window.prompt("Replay channel " + channel + " of topic " + topic + " from: earliest, latest, or a time (RFC 3339, e.g. " +
            new Date(Date.now() - 3600000).toISOString().replace(/\.\d+Z$/, "Z") + ")", "earliest");
          if (!to) { return; }
          act(p, "Reset channel " + channel + " of topic " + topic + " to " + to + "? Every message the topic retains from there is delivered to it again.",
            "POST", cpath, { action: "reset", to: to }, null, b);
        }
      });
    }

    p.load = function () {
      return Promise.all([
        api("GET", cpath).then(null, function (e) { return { failed: e }; }),
        historyOrNull("/api/history/topics/" + enc(topic) + "/" + enc(channel) + "?points=240")
      ]).then(function (r) {
        if (p.dead) { return; }
        var h = r[1] || {};
        p.hist = h;
        document.getElementById("charts").innerHTML =
          chart("Depth", h.total, [{ key: "depth", label: "depth", color: "var(--c1)" }, { key: "in_flight", label: "in-flight", color: "var(--c2)" }, { key: "deferred", label: "deferred", color: "var(--c4)" }], h) +
          chart("Receive rate (msg/s)", h.total, [{ key: "rate", label: "received", color: "var(--c3)" }], h);
        if (r[0].failed) {
          if (r[0].failed.status === 500) { r[0].failed.message = "Channel " + channel + " not found on any nsqd producing " + topic + " (" + r[0].failed.message + ")"; }
          throw r[0].failed;
        }
        p.data = r[0];
        loaded(p, [r[0].message]);
        draw();
      });
    };

    function draw() {
      var c = p.data;
      document.getElementById("paused").innerHTML = pausedLabel(c);
      var pb = document.getElementById("pause-btn");
      if (pb) { pb.textContent = c.paused ? "UnPause Channel" : "Pause Channel"; pb.className = "btn" + (c.paused ? " green" : ""); }
      var nodes = c.nodes || [];
      var qs = quantiles(nodes.concat([c]));
      var hn = (p.hist && p.hist.nodes) || {};
      var topo = nodes.some(function (n) { return n.zone_local_msg_count || n.region_local_msg_count; });
      function pctOf(part, all) { return all ? (part / all * 100).toFixed(1) + "%" : "–"; }
      var html = "<h2>Channel</h2>";
      html += '<div class="table-wrap"><table class="grid wide" id="channel-nodes"><thead><tr class="group"><th></th><th colspan="4">Message Queues</th><th colspan="' + (topo ? 8 : 5) + '">Statistics</th>' +
        (qs.length ? '<th colspan="' + qs.length + '">E2E Processing Latency</th>' : "") + "</tr>" +
        "<tr><th>NSQd Host</th>" + th("Depth", WORDS.channelDepth) + th("Memory + Disk", WORDS.memDisk) + th("In-Flight", WORDS.inFlight) + th("Deferred", WORDS.deferred) +
        th("Requeued", WORDS.requeued) + th("Timed Out", WORDS.timedOut) + th("Received", WORDS.received) + th("Receive rate (msg/s)", WORDS.receiveRate) + th("Connections", WORDS.connections) +
        (topo ? '<th class="num">Zone-Local</th><th class="num">Region-Local</th><th class="num">Global</th>' : "") + e2eHeads(qs) + "</tr></thead><tbody>";
      function row(n, label, rate, total) {
        return "<tr" + (total ? ' class="total"' : ' data-node="' + esc(n.node) + '"') + "><td>" + label + "</td>" +
          td(n.depth) + memDisk(n) + td(n.in_flight_count) + td(n.deferred_count) + td(n.requeue_count) + td(n.timeout_count) +
          td(n.message_count) + tdText(rateText(rate)) + td(n.client_count) +
          (topo ? tdText(pctOf(n.zone_local_msg_count, n.delivery_msg_count)) + tdText(pctOf(n.region_local_msg_count, n.delivery_msg_count)) + tdText(pctOf(n.global_msg_count, n.delivery_msg_count)) : "") +
          e2eCells(n, qs) + "</tr>";
      }
      nodes.forEach(function (n) {
        html += row(n, esc(n.hostname) + " (" + nodeLink(n.node) + ")" + pausedLabel(n), lastRate(hn[n.node]), false);
      });
      html += row(c, "Total:", lastRate(p.hist && p.hist.total), true) + "</tbody></table></div>";
      var clients = c.clients || [];
      html += "<h2>Client Connections" + (clients.length ? " (" + clients.length + ")" : "") + "</h2>";
      if (!clients.length) {
        html += notice("Notice", "No clients connected to this channel");
      } else {
        html += '<div class="table-wrap"><table class="grid wide" id="clients"><thead>' + clientHead(true) + "</thead><tbody>" + clientRows(clients, true) + "</tbody></table></div>";
      }
      document.getElementById("content").innerHTML = html;
      channelSettings(p, c);
    }
  }

  // ------------------------------------------------------------------
  // Nodes (/nodes) and node (/nodes/:node)
  // ------------------------------------------------------------------

  function nodesPage(p) {
    p.title = "Nodes";
    app.innerHTML = '<div id="banners"></div><div id="content"><p class="muted">Loading…</p></div>';
    p.load = function () {
      return api("GET", "/api/nodes").then(function (d) {
        if (p.dead) { return; }
        loaded(p, [d.message]);
        var nodes = d.nodes || [];
        var lookupd = LOOKUPDS.length > 0;
        var html = "<h1>NSQd Nodes (" + nodes.length + ")</h1><br>";
        if (!nodes.length) {
          html += notice("Notice", "No nsqd nodes found");
        } else {
          html += '<div class="table-wrap"><table class="grid wide" id="nodes"><thead><tr><th>Hostname</th><th>Broadcast Address</th><th class="num">TCP Port</th>' +
            '<th class="num">HTTP Port</th><th>Version</th><th>Region</th><th>Zone</th>' + (lookupd ? "<th>Lookupd Conns.</th>" : "") + "<th>Topics</th></tr></thead><tbody>";
          nodes.forEach(function (n) {
            var addr = n.broadcast_address.indexOf(":") >= 0 ? "[" + n.broadcast_address + "]" : n.broadcast_address;
            var node = addr + ":" + n.http_port;
            var topics = n.topics || [];
            html += '<tr data-node="' + esc(node) + '"' + (n.out_of_date ? ' class="out-of-date" title="older than the newest nsqd version in the cluster"' : "") + ">" +
              "<td>" + esc(n.hostname) + "</td><td>" + nodeLink(node, n.broadcast_address) + "</td>" + tdText(esc(n.tcp_port)) + tdText(esc(n.http_port)) +
              "<td>" + esc(n.version) + (n.out_of_date ? ' <span class="label-b orange">out of date</span>' : "") + "</td>" +
              "<td>" + esc(n.topology_region || "") + "</td><td>" + esc(n.topology_zone || "") + "</td>" +
              (lookupd ? "<td>" + lookupdConns(n) + "</td>" : "") +
              '<td><span class="label-b grey">' + topics.length + "</span> " + topics.map(function (t) {
                return link("/topics/" + enc(t.topic), esc(t.topic), "label-b" + (t.tombstoned ? " orange" : "")) + (t.tombstoned ? '<span class="small muted" title="tombstoned on nsqlookupd"> (tombstoned)</span>' : "");
              }).join("") + "</td></tr>";
          });
          html += "</tbody></table></div>";
        }
        document.getElementById("content").innerHTML = html;
      });
    };
  }

  function lookupdConns(n) {
    var r = n.remote_addresses || [];
    var warn = r.length !== LOOKUPDS.length;
    return "<details><summary><span class=\"label-b " + (warn ? "orange" : "green") + '" title="' + (warn ? "not connected to every nsqlookupd" : "connected to every nsqlookupd") + '">' + r.length + "</span></summary><ul>" +
      r.map(function (a) { return '<li class="mono">' + esc(a) + "</li>"; }).join("") + "</ul></details>";
  }

  // Topic / channel / client host (what is left), Depth, Memory + Disk,
  // four counts, Published / Received, Channels / Connections; Action.
  var NODE_COLS = ["", "8%", "11%", "7%", "7%", "7%", "7%", "9%", "9%"];
  function nodePage(p, params) {
    var node = params[0];
    p.title = node;
    app.innerHTML = crumbs([["Nodes", "/nodes"], [node]]) + '<div id="banners"></div><div class="cards" id="cards"></div><div id="content"><p class="muted">Loading…</p></div>';
    bindActions(p, document.getElementById("content"), {
      tombstone: function (b) {
        var topic = b.getAttribute("data-topic");
        act(p, tombstoneQuestion(topic, node), "DELETE", "/api/nodes/" + enc(node), { topic: topic }, null, b);
      }
    });
    p.load = function () {
      return api("GET", "/api/nodes/" + enc(node)).then(function (d) {
        if (p.dead) { return; }
        loaded(p, [d.message]);
        var topics = d.topics || [];
        var nchan = sum(topics, function (t) { return (t.channels || []).length; });
        document.getElementById("cards").innerHTML = card("Topics", num(topics.length)) + card("Channels", num(nchan)) +
          card("Published", num(d.total_messages), "messages, all topics") + card("Consumers", num(d.total_clients), "connections") +
          card("Queued", num(sum(topics, function (t) { return t.depth + sum(t.channels, function (c) { return c.depth; }); })), "waiting in topics and channels");
        if (!topics.length) {
          document.getElementById("content").innerHTML = notice("Notice", "This nsqd has no topics");
          return;
        }
        // One header for topic and channel rows (a header per topic made
        // 1,000 topics into 76,000 DOM nodes and seconds of layout); client
        // rows, which have columns of their own, keep their sub-header.
        var actCell = ADMIN ? "<td></td>" : "";
        // With actions, base.css makes the text cells of a topic row as
        // tall as its Tombstone button, so that they are laid out once.
        var cols = NODE_COLS.concat(ADMIN ? ["90px"] : []);
        var head = rowsTable("node-topics", ADMIN ? "with-actions" : "", cols, "<tr>" +
          "<th>Topic / Channel</th>" + th("Depth", WORDS.topicDepth + "; channel rows: " + WORDS.channelDepth) + th("Memory + Disk", WORDS.memDisk) +
          th("In-Flight", WORDS.inFlight) + th("Deferred", WORDS.deferred) + th("Requeued", WORDS.requeued) + th("Timed Out", WORDS.timedOut) +
          th("Published / Received", "topic rows: " + WORDS.published + "; channel rows: " + WORDS.received) +
          th("Channels / Connections", "topic rows: channels of the topic; channel rows: " + WORDS.connections) +
          (ADMIN ? "<th>Action</th>" : "") + "</tr>");
        var groups = topics.map(function (t) {
          var html = '<tr class="topic-row" data-topic="' + esc(t.topic_name) + '"><td title="' + esc(t.topic_name) + '">' + topicLink(t.topic_name) + pausedLabel(t) + "</td>" +
            td(t.depth) + memDisk(t) + '<td colspan="4"></td>' + td(t.message_count) + td((t.channels || []).length) +
            (ADMIN ? "<td>" + tombstoneButton(t.topic_name, node) + "</td>" : "") + "</tr>";
          (t.channels || []).forEach(function (c) {
            html += '<tr class="channel-row" data-channel="' + esc(t.topic_name + "/" + c.channel_name) + '"><td class="indent1" title="' + esc(c.channel_name) + '">' +
              link("/topics/" + enc(t.topic_name) + "/" + enc(c.channel_name), esc(c.channel_name)) + pausedLabel(c) + "</td>" +
              td(c.depth) + memDisk(c) + td(c.in_flight_count) + td(c.deferred_count) + td(c.requeue_count) + td(c.timeout_count) +
              td(c.message_count) + td(c.client_count) + actCell + "</tr>";
            var clients = c.clients || [];
            if (clients.length) {
              html += '<tr class="sub-head"><td class="indent2">Client Host</td><td>User-Agent</td><td>Attributes</td>' + subTh("In-Flight", WORDS.inFlight) +
                subTh("Ready Count", "messages nsqd may send now (the client's RDY)") + subTh("Finished", WORDS.finished) + subTh("Requeued", WORDS.requeued) +
                subTh("Delivered", WORDS.delivered) + subTh("Connected", "time since the client connected") + actCell + "</tr>";
              html += clientRows(clients, false, true, actCell);
            }
          });
          return html;
        });
        var box = document.getElementById("node-topics");
        if (!box) {
          document.getElementById("content").innerHTML = head;
          box = document.getElementById("node-topics");
        }
        fillRows(p, box, cols, groups);
      });
    };
  }

  // ------------------------------------------------------------------
  // Lookup (/lookup)
  // ------------------------------------------------------------------

  function lookupPage(p) {
    p.title = "Lookup";
    var form = ADMIN ? '<h2>Create Topic/Channel</h2><div class="info">Set up topics and channels before producers and consumers are deployed. ' +
      "If <i>Channel Name</i> is empty, only the topic is created. With <i>Replicas</i> (nsq-rs), the topic is replicated: " +
      "created through the replication cluster its nsqds belong to, and acknowledged only once that many of them have each message.</div>" +
      '<form id="create" class="form-row"><input type="text" id="new-topic" placeholder="Topic Name" autocomplete="off">' +
      '<input type="text" id="new-channel" placeholder="Channel Name" autocomplete="off">' +
      '<input type="number" id="new-replicas" min="1" max="255" placeholder="Replicas" title="replicated topic: replicas=N (empty: an NSQ topic)">' +
      '<button class="btn plain" type="submit">Create</button></form>' : "";
    app.innerHTML = '<h1>Lookup</h1><br><div id="banners"></div><div id="content"><p class="muted">Loading…</p></div>' + form;
    if (ADMIN) {
      document.getElementById("create").addEventListener("submit", function (e) {
        e.preventDefault();
        var t = document.getElementById("new-topic").value.trim();
        var c = document.getElementById("new-channel").value.trim();
        var n = document.getElementById("new-replicas").value.trim();
        if (!t) { flash(p, "error", "Topic Name is required"); return; }
        var body = { topic: t };
        if (c) { body.channel = c; }
        if (n) { body.replicas = n; }
        api("POST", "/api/topics", body).then(function (d) {
          var what = (n ? "replicated topic " + t + " (replicas " + n + ")" : "topic " + t) + (c ? " and channel " + c : "");
          flash(p, d.message ? "warn" : "ok", d.message || ("Created " + what));
          document.getElementById("new-topic").value = "";
          document.getElementById("new-channel").value = "";
          document.getElementById("new-replicas").value = "";
          p.refresh();
        }, function (err) { flash(p, "error", err.message); });
      });
    }
    bindActions(p, document.getElementById("content"), {
      "delete-topic": function (b) {
        var t = b.getAttribute("data-topic");
        act(p, "Delete topic " + t + "?", "DELETE", "/api/topics/" + enc(t), undefined, null, b);
      },
      "delete-channel": function (b) {
        var t = b.getAttribute("data-topic"), c = b.getAttribute("data-channel");
        act(p, "Delete channel " + c + " of topic " + t + "?", "DELETE", "/api/topics/" + enc(t) + "/" + enc(c), undefined, null, b);
      }
    });
    p.load = function () {
      var content = document.getElementById("content");
      if (!LOOKUPDS.length) {
        content.innerHTML = notice("Notice", "nsqadmin is not configured with nsqlookupd hosts (--lookupd-http-address)");
        return Promise.resolve();
      }
      return api("GET", "/api/topics?inactive=true").then(function (d) {
        if (p.dead) { return; }
        loaded(p, [d.message]);
        var html = '<div class="table-wrap"><table class="grid" id="lookupds"><thead><tr><th>nsqlookupd Host</th></tr></thead><tbody>' +
          LOOKUPDS.map(function (a) { return '<tr><td class="mono">' + esc(a) + "</td></tr>"; }).join("") + "</tbody></table></div>";
        var names = Object.keys(d.topics || {}).sort();
        if (!names.length) {
          html += notice("Notice", "No inactive Topics");
        } else {
          html += '<h2>Inactive Topics <span class="small muted">(registered, but no nsqd produces them)</span></h2><div class="table-wrap"><table class="grid" id="inactive"><thead><tr><th>Topic</th><th>Channels</th>' +
            (ADMIN ? "<th>Action</th>" : "") + "</tr></thead><tbody>";
          names.forEach(function (t) {
            var chans = d.topics[t] || [];
            html += '<tr data-topic="' + esc(t) + '"><td>' + esc(t) + "</td><td>" +
              (chans.length ? chans.map(function (c) {
                return '<span class="chip"><span class="label-b grey">' + esc(c) + "</span>" +
                  (ADMIN ? '<button class="btn mini plain" data-act="delete-channel" data-topic="' + esc(t) + '" data-channel="' + esc(c) + '" title="delete channel ' + esc(c) + ' from nsqlookupd (asks first)">Delete</button>' : "") + "</span>";
              }).join(" ") : '<span class="muted">none</span>') + "</td>" +
              (ADMIN ? '<td><button class="btn mini red" data-act="delete-topic" data-topic="' + esc(t) + '" title="delete topic ' + esc(t) + ' from nsqlookupd (asks first)">Delete Topic</button></td>' : "") + "</tr>";
          });
          html += "</tbody></table></div>";
        }
        content.innerHTML = html;
      });
    };
  }

  // ------------------------------------------------------------------
  // Replication (/replication; nsq-rs)
  // ------------------------------------------------------------------

  /* The replication cluster as one member's GET /replication shows it:
     its members, each group's leader, a membership change under way; for
     admins, a member added (node id + address) or removed, each confirmed,
     asked of a member through nsqadmin, the member's refusal shown in its
     words (docs/replication.md, "Membership online"). */
  function replicationPage(p) {
    p.title = "Replication";
    var form = ADMIN ? '<h2>Add member</h2><div class="info">Start the new nsqd with the replication flags (a new <i>--node-id</i>, ' +
      "<i>--replication-address</i>, and <i>--replication-peer</i> naming the running members), then add it here: it is a learner of each of its groups " +
      "until it holds what they committed, then a voter. One change at a time.</div>" +
      '<form id="add-member" class="form-row"><input type="number" id="member-id" min="1" placeholder="Node ID" autocomplete="off">' +
      '<input type="text" id="member-address" placeholder="Replication address (host:port)" autocomplete="off" style="width: 20em">' +
      '<button class="btn plain" type="submit" id="add-member-btn">Add member</button></form>' : "";
    app.innerHTML = '<h1>Replication <span class="muted small">(nsq-rs)</span></h1><br><div id="banners"></div>' +
      '<div id="content"><p class="muted">Loading…</p></div>' + form;
    function change(body, question, button) {
      if (!window.confirm(question)) { return; }
      if (button) { button.disabled = true; }
      api("POST", "/api/replication", body).then(function (d) {
        flash(p, "ok", d.message || "Done");
        p.refresh();
        return true;
      }, function (err) {
        flash(p, "error", err.message);
        return false;
      }).then(function (ok) {
        if (button) { button.disabled = false; }
        if (ok && body.action === "add") {
          document.getElementById("member-id").value = "";
          document.getElementById("member-address").value = "";
        }
      });
    }
    if (ADMIN) {
      document.getElementById("add-member").addEventListener("submit", function (e) {
        e.preventDefault();
        var id = document.getElementById("member-id").value.trim();
        var address = document.getElementById("member-address").value.trim();
        if (!id || !address) { flash(p, "error", "Node ID and Replication address are required"); return; }
        change({ action: "add", id: id, address: address },
          "Add member " + id + " at " + address + " to the replication cluster?",
          document.getElementById("add-member-btn"));
      });
    }
    bindActions(p, document.getElementById("content"), {
      "remove-member": function (b) {
        var id = b.getAttribute("data-id"), address = b.getAttribute("data-address");
        change({ action: "remove", id: id },
          "Remove member " + id + " (" + address + ") from the replication cluster? Its groups elect or keep leaders among the others; stop that nsqd afterwards.", b);
      }
    });
    p.load = function () {
      return api("GET", "/api/replication").then(function (d) {
        if (p.dead) { return; }
        loaded(p, [d.message]);
        var r = d.replication;
        if (!r) {
          document.getElementById("content").innerHTML = notice("Notice", "No nsqd of this cluster is a member of a replication cluster (started with --node-id and --replication-address).");
          return;
        }
        var peers = r.peers || [], groups = r.groups || [];
        var html = '<p class="muted">As node ' + esc(r.node_id) + " (" + nodeLink(d.node) + ") shows it: map version " + esc(r.map_version === undefined ? "-" : r.map_version) +
          ", protocol " + esc(r.protocol === undefined ? "-" : r.protocol) + ", standing " + esc(r.standing || "-") + ".</p>";
        if (r.change) {
          html += '<div class="banner banner-warn" id="member-change">Under way: ' + esc(r.change.change) + " (" + esc(r.change.groups_done) + " of " + esc(r.change.groups) + " groups done)</div>";
        }
        html += '<h2>Members (' + peers.length + ')</h2><div class="table-wrap"><table class="grid" id="members"><thead><tr><th>Node ID</th><th>Replication address</th><th>Protocol</th><th>Leads groups</th>' +
          (ADMIN ? "<th>Action</th>" : "") + "</tr></thead><tbody>";
        peers.forEach(function (m) {
          var leads = groups.filter(function (g) { return g.leader === m.node_id; }).map(function (g) { return g.group; });
          html += '<tr data-member="' + esc(m.node_id) + '"><td>' + esc(m.node_id) + (m.node_id === r.node_id ? ' <span class="label-b grey">asked</span>' : "") + '</td><td class="mono">' + esc(m.address) + "</td>" +
            "<td>" + esc(m.protocol === null || m.protocol === undefined ? "never met" : m.protocol) + "</td><td>" + esc(leads.join(", ")) + "</td>" +
            (ADMIN ? '<td><button class="btn mini red" data-act="remove-member" data-id="' + esc(m.node_id) + '" data-address="' + esc(m.address) + '">Remove member</button></td>' : "") + "</tr>";
        });
        html += "</tbody></table></div>";
        html += '<h2>Groups (' + groups.length + ')</h2><div class="table-wrap"><table class="grid" id="groups"><thead><tr><th>Group</th><th>Leader</th></tr></thead><tbody>' +
          groups.map(function (g) {
            return "<tr><td>" + esc(g.group) + "</td><td>" + esc(g.leader === null || g.leader === undefined ? "none" : g.leader) + "</td></tr>";
          }).join("") + "</tbody></table></div>";
        document.getElementById("content").innerHTML = html;
      });
    };
  }

  // ------------------------------------------------------------------
  // Counter (/counter)
  // ------------------------------------------------------------------

  function counterPage(p) {
    p.title = "Counter";
    document.body.className = "counter-page";
    app.innerHTML = '<div id="banners"></div><div class="counter"><div class="digits" id="digits"></div>' +
      '<div class="caption">Messages Processed</div><div class="rate" id="rate"></div>' +
      '<div class="rate small">received by every channel of every topic (a message sent to three channels counts three times)</div></div>' +
      '<div class="counter-chart" id="counter-chart"></div>';
    p.shown = null;
    p.target = null;
    p.load = function () {
      return Promise.all([api("GET", "/api/counter"), historyOrNull("/api/history?points=240")]).then(function (r) {
        if (p.dead) { return; }
        loaded(p, [r[0].message]);
        var total = 0;
        var stats = r[0].stats || {};
        Object.keys(stats).forEach(function (k) { total += stats[k].message_count || 0; });
        p.target = total;
        if (p.shown == null) { p.shown = total; draw(total); }
        animate();
        var h = r[1] || {};
        var cl = h.cluster || {};
        document.getElementById("rate").innerHTML = lastRate(cl) != null ? esc(rateText(lastRate(cl))) + " msgs/sec" : "";
        document.getElementById("counter-chart").innerHTML = chart("Messages processed per second, all channels", cl, [{ key: "rate", label: "msg/s", color: "#4fb3e8" }], h);
      });
    };

    function animate() {
      cancelAnimationFrame(p.raf);
      var from = p.shown, to = p.target, t0 = performance.now(), dur = 1200;
      if (from === to) { draw(to); return; }
      function step(now) {
        if (p.dead) { return; }
        var f = Math.min(1, (now - t0) / dur);
        p.shown = Math.round(from + (to - from) * (1 - Math.pow(1 - f, 3)));
        draw(p.shown);
        if (f < 1) { p.raf = requestAnimationFrame(step); }
      }
      p.raf = requestAnimationFrame(step);
    }

    function draw(n) {
      var s = num(n);
      document.getElementById("digits").innerHTML = s.split("").map(function (ch) {
        return '<span class="digit' + (ch === "," ? " sep" : "") + '">' + esc(ch) + "</span>";
      }).join("");
      document.getElementById("digits").setAttribute("data-total", String(n));
    }
  }

  render();
})();
