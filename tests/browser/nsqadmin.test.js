// Real-browser test of nsq-rs nsqadmin.
//
// Starts a cluster from the built binaries (one nsqlookupd, two nsqd, nsqadmin
// in lookupd mode), publishes messages, connects consumers, then drives
// headless Chromium (playwright-core, /usr/bin/chromium) through every page:
// checks that the numbers shown match nsqd's own /stats, creates a
// topic/channel from the Lookup page, pauses a channel from the UI (dismissing
// the confirm dialog once, then accepting it) and checks nsqd shows it paused,
// sets a channel's and a topic's nsq-rs settings through their forms,
// asks a replay of a channel (refused: its topic is not replicated), adds
// and removes a member of a replication cluster from the Replication page
// (confirmed; an existing id refused in the member's words), and saves a
// screenshot of each page.
//
// usage: node nsqadmin.test.js <bin dir> <screenshot dir>
"use strict";

const { chromium } = require("playwright-core");
const { spawn } = require("child_process");
const fs = require("fs");
const net = require("net");
const os = require("os");
const path = require("path");

const BIN = process.argv[2];
const OUT = process.argv[3];
const started = Date.now();
const children = [];
const sockets = [];
let tmp = null; // data dirs and the browser profile; removed at the end, also on failure
let passed = 0;
let failed = 0;

function log(...a) { console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s]`, ...a); }

/*
 * The pages that list every topic draw a header table and the rows in
 * tables of their own (main.js, rowsTable): each row matching `rowSel`
 * whose cells are one per column must have its cells' edges where the
 * header's are. True, or the first misfit.
 */
async function columnsAligned(page, box, rowSel) {
  return page.$eval(box, (el, sel) => {
    const edges = (cells) => Array.from(cells).map((c) => { const r = c.getBoundingClientRect(); return [Math.round(r.left), Math.round(r.right)]; });
    const head = edges(el.querySelectorAll("thead th"));
    const rows = Array.from(el.querySelectorAll(sel)).filter((tr) => tr.children.length === head.length);
    if (!rows.length) { return `no ${sel} with ${head.length} cells`; }
    for (const tr of rows) {
      const e = edges(tr.children);
      if (JSON.stringify(e) !== JSON.stringify(head)) { return { row: tr.textContent.slice(0, 40), head, cells: e }; }
    }
    return true;
  }, rowSel);
}

function check(cond, what, detail) {
  if (cond) { passed++; log("ok  ", what); return; }
  failed++;
  log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail));
}

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// A port free a moment ago on 127.0.0.1, below the kernel's ephemeral range:
// this test runs beside the Rust suites (scripts/test.sh), whose outgoing
// connections take their local ports from that range, so a port probed free
// there may be taken before a daemon binds it (tests/src/ports.rs).
function canListen(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

async function freePort() {
  let low = 32768;
  try {
    low = Number(fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || low;
  } catch (_) { /* not Linux: the default range */ }
  const [lo, hi] = low >= 10000 ? [Math.floor(low / 2), low] : [61000, 65535];
  for (let i = 0; i < 1000; i++) {
    const p = lo + Math.floor(Math.random() * (hi - lo));
    if (await canListen(p)) return p;
  }
  throw new Error("no free port below the ephemeral range");
}

async function http(method, addr, p, body) {
  const r = await fetch(`http://${addr}${p}`, { method, body });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, text, json };
}

async function waitFor(what, fn, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try { last = await fn(); if (last) { return last; } } catch (e) { last = e.message; }
    await sleep(200);
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

function start(name, args) {
  const logFile = path.join(OUT, `${name}-${children.length}.log`);
  const fd = fs.openSync(logFile, "w");
  const child = spawn(path.join(BIN, name), args, { stdio: ["ignore", fd, fd] });
  children.push(child);
  return child;
}

async function daemon(name, args, httpAddr, pingPath = "/ping") {
  start(name, args);
  await waitFor(`${name} /ping`, async () => (await http("GET", httpAddr, pingPath)).text === "OK");
}

/* A minimal NSQ consumer over raw TCP: IDENTIFY, SUB, RDY, FIN every message, answer heartbeats. */
function consumer(tcpAddr, topic, channel, rdy) {
  const [host, port] = tcpAddr.split(":");
  const s = net.connect(Number(port), host);
  sockets.push(s);
  let buf = Buffer.alloc(0);
  s.on("connect", () => {
    const ident = Buffer.from(JSON.stringify({ client_id: "browser-test", hostname: "test-consumer", user_agent: "nsqadmin-browser-test/1.0" }));
    const len = Buffer.alloc(4);
    len.writeInt32BE(ident.length);
    s.write(Buffer.concat([Buffer.from("  V2IDENTIFY\n"), len, ident, Buffer.from(`SUB ${topic} ${channel}\nRDY ${rdy}\n`)]));
  });
  s.on("data", (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 8) {
      const size = buf.readInt32BE(0);
      if (buf.length < 4 + size) { break; }
      const type = buf.readInt32BE(4);
      const body = buf.subarray(8, 4 + size);
      buf = buf.subarray(4 + size);
      if (type === 0 && body.toString() === "_heartbeat_") { s.write("NOP\n"); }
      if (type === 2) { s.write(`FIN ${body.subarray(10, 26).toString()}\n`); }
    }
  });
  s.on("error", () => {});
  return s;
}

function findTopic(stats, t) { return (stats.topics || []).find((x) => x.topic_name === t); }
function findChannel(stats, t, c) { const tt = findTopic(stats, t); return tt && tt.channels.find((x) => x.channel_name === c); }
function toNum(text) { return Number(String(text).replace(/[,\s]/g, "")); }

async function cellNums(page, rowSelector) {
  return page.$$eval(`${rowSelector} td`, (tds) => tds.map((td) => td.textContent.trim()));
}

async function main() {
  fs.mkdirSync(OUT, { recursive: true });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "nsqadmin-browser-"));
  const ports = [];
  while (ports.length < 7) { const p = await freePort(); if (!ports.includes(p)) ports.push(p); }
  const lookupd = { tcp: `127.0.0.1:${ports[0]}`, http: `127.0.0.1:${ports[1]}` };
  const nsqds = [
    { tcp: `127.0.0.1:${ports[2]}`, http: `127.0.0.1:${ports[3]}`, node: `127.0.0.1:${ports[3]}` },
    { tcp: `127.0.0.1:${ports[4]}`, http: `127.0.0.1:${ports[5]}`, node: `127.0.0.1:${ports[5]}` },
  ];
  const admin = `127.0.0.1:${ports[6]}`;

  log("starting cluster in", tmp);
  await daemon("nsqlookupd", [`--tcp-address=${lookupd.tcp}`, `--http-address=${lookupd.http}`], lookupd.http);
  for (const [i, n] of nsqds.entries()) {
    const dir = path.join(tmp, `nsqd${i}`);
    fs.mkdirSync(dir);
    await daemon("nsqd", [`--tcp-address=${n.tcp}`, `--http-address=${n.http}`, `--data-path=${dir}`, `--lookupd-tcp-address=${lookupd.tcp}`, "--broadcast-address=127.0.0.1"], n.http);
  }
  await daemon("nsqadmin", [`--http-address=${admin}`, `--lookupd-http-address=${lookupd.http}`], admin);

  // --- data: orders (archive: no consumer; live: consumers) and clicks (analytics) on both nodes
  for (const n of nsqds) {
    for (const [t, c] of [["orders", "archive"], ["orders", "live"], ["clicks", "analytics"]]) {
      await http("POST", n.http, `/topic/create?topic=${t}`);
      await http("POST", n.http, `/channel/create?topic=${t}&channel=${c}`);
    }
  }
  for (const n of nsqds) { consumer(n.tcp, "orders", "live", 50); }
  consumer(nsqds[0].tcp, "clicks", "analytics", 10);
  const body = (k) => Array.from({ length: k }, (_, i) => `message ${i}`).join("\n");
  const histSamples = async () => ((await http("GET", admin, "/api/history")).json.cluster.ts || []).length;
  // batch A, a couple of history samples, batch B: the charts get a step and a rate spike
  await http("POST", nsqds[0].http, "/mpub?topic=orders", body(200));
  await http("POST", nsqds[1].http, "/mpub?topic=orders", body(100));
  await http("POST", nsqds[0].http, "/mpub?topic=clicks", body(120));
  await http("POST", nsqds[1].http, "/mpub?topic=clicks", body(80));
  const s0 = await histSamples();
  await waitFor("2 history samples after batch A", async () => (await histSamples()) >= s0 + 2, 30000);
  await http("POST", nsqds[0].http, "/mpub?topic=orders", body(100));
  await http("POST", nsqds[1].http, "/mpub?topic=orders", body(100));
  await waitFor("both producers on nsqlookupd", async () => ((await http("GET", lookupd.http, "/lookup?topic=orders")).json || {}).producers?.length === 2);
  await waitFor("consumers drained orders/live", async () => {
    for (const n of nsqds) {
      const c = findChannel((await http("GET", n.http, "/stats?format=json")).json, "orders", "live");
      if (!c || c.depth !== 0 || c.in_flight_count !== 0) { return false; }
    }
    return true;
  });
  const stats = [];
  for (const n of nsqds) { stats.push((await http("GET", n.http, "/stats?format=json")).json); }
  // live traffic on a topic the checks below leave alone ("events"), so rates move while we look
  await http("POST", nsqds[0].http, "/channel/create?topic=events&channel=tail");
  consumer(nsqds[0].tcp, "events", "tail", 20);
  let publishing = true;
  const publisher = (async () => {
    while (publishing) {
      await http("POST", nsqds[0].http, "/mpub?topic=events", body(5)).catch(() => {});
      await sleep(200);
    }
  })();
  const s1 = await histSamples();
  await waitFor("2 history samples after batch B", async () => (await histSamples()) >= s1 + 2, 30000);

  // A fresh profile directory for this run (launchPersistentContext passes it as --user-data-dir).
  const ctx = await chromium.launchPersistentContext(path.join(tmp, "chromium-profile"), {
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 900 },
  });
  await ctx.addInitScript(() => { localStorage.setItem("nsqadmin.refresh", "2000"); });
  const page = await ctx.newPage();
  const jsErrors = [];
  page.on("pageerror", (e) => jsErrors.push(e.message));
  page.on("console", (m) => { if (m.type() === "error") { jsErrors.push(m.text()); } });
  // A refresh still in flight when the test navigates away is cancelled by
  // the browser (net::ERR_ABORTED), more often on a busy machine: that is
  // the navigation, not a failed request.
  page.on("requestfailed", (r) => {
    const why = (r.failure() || {}).errorText || "";
    if (why !== "net::ERR_ABORTED") { jsErrors.push(`request failed: ${r.url()} ${why}`); }
  });
  const base = `http://${admin}`;
  const shot = async (name) => { await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true }); log("screenshot", name); };

  // --- topics list: depth (topic + channels), messages, consumers per topic
  await page.goto(`${base}/`);
  for (const t of ["orders", "clicks"]) {
    const wantDepth = stats.reduce((a, s) => { const tt = findTopic(s, t); return a + tt.depth + tt.channels.reduce((b, c) => b + c.depth, 0); }, 0);
    const wantMsgs = stats.reduce((a, s) => a + findTopic(s, t).message_count, 0);
    const got = await waitFor(`topics row ${t}`, async () => {
      const cells = await cellNums(page, `#topics-table tr[data-topic="${t}"]`);
      return cells.length > 5 && toNum(cells[1]) === wantDepth && toNum(cells[4]) === wantMsgs ? cells : false;
    }, 20000).catch((e) => e.message);
    check(Array.isArray(got), `index: ${t} depth ${wantDepth} and messages ${wantMsgs} as in nsqd /stats`, got);
  }
  check((await page.$$("#topics-table svg.spark")).length >= 2, "index: sparklines drawn");
  const aligned = await columnsAligned(page, "#topics-table", "tr[data-topic]");
  check(aligned === true, "index: every row's columns line up with the header's", aligned);
  await shot("index");
  // the filter redraws the table in place: one match, no match, then all again
  const topicRows = async () => page.$$eval("#topics-table tbody tr", (trs) => trs.map((tr) => tr.getAttribute("data-topic") || tr.textContent));
  const allRows = await topicRows();
  await page.fill("#filter", "ORDE");
  const one = await waitFor("filtered rows", async () => { const r = await topicRows(); return r.length === 1 ? r : false; }, 5000).catch((e) => e.message);
  check(JSON.stringify(one) === JSON.stringify(["orders"]), "index: the filter leaves the matching topic only", one);
  await page.fill("#filter", "no-such-topic");
  const none = await waitFor("no rows", async () => { const r = await topicRows(); return r.length === 1 && r[0].includes("no topic matches") ? r : false; }, 5000).catch((e) => e.message);
  check(Array.isArray(none), "index: a filter matching nothing says so", none);
  await page.fill("#filter", "");
  const back = await waitFor("all rows", async () => { const r = await topicRows(); return r.length === allRows.length ? r : false; }, 5000).catch((e) => e.message);
  check(JSON.stringify(back) === JSON.stringify(allRows), "index: clearing the filter brings every topic back", back);

  // --- topic page
  await page.goto(`${base}/topics/orders`);
  await page.waitForSelector("#topic-nodes");
  for (const [i, n] of nsqds.entries()) {
    const t = findTopic(stats[i], "orders");
    const cells = await cellNums(page, `#topic-nodes tr[data-node="${n.node}"]`);
    check(toNum(cells[1]) === t.depth && cells[2] === `${t.depth - t.backend_depth} + ${t.backend_depth}` && toNum(cells[5]) === t.message_count && toNum(cells[7]) === t.channels.length,
      `topic page: node ${n.node} depth/memory+disk/messages/channels match nsqd`, cells);
  }
  const total = await cellNums(page, "#topic-nodes tr.total");
  check(toNum(total[5]) === 500, "topic page: total messages 500", total);
  for (const ch of ["archive", "live"]) {
    const want = stats.map((s) => findChannel(s, "orders", ch));
    const cells = await cellNums(page, `#topic-channels tr[data-channel="${ch}"]`);
    check(toNum(cells[1]) === want[0].depth + want[1].depth && toNum(cells[7]) === want[0].message_count + want[1].message_count && toNum(cells[9]) === want[0].client_count + want[1].client_count,
      `topic page: channel ${ch} depth/messages/connections match nsqd`, cells);
  }
  await page.waitForSelector(".chart path", { timeout: 10000, state: "attached" }).then(() => check(true, "topic page: charts drawn"), () => check(false, "topic page: charts drawn"));
  // tombstone: a labelled button per node, which asks before doing anything
  const tombs = await page.$$eval("#topic-nodes button[data-act=tombstone]", (bs) => bs.map((b) => b.textContent));
  check(tombs.length === 2 && tombs.every((t) => t === "Tombstone"), "topic page: a button labelled Tombstone per node", tombs);
  let question = null;
  page.once("dialog", (d) => { question = d.message(); d.dismiss(); });
  await page.click(`#topic-nodes tr[data-node="${nsqds[0].node}"] button[data-act=tombstone]`);
  await waitFor("the tombstone question", async () => question !== null, 5000).catch(() => {});
  await sleep(300); // had the dismissed dialog done anything, nsqlookupd would show it by now
  const producers = ((await http("GET", lookupd.http, "/lookup?topic=orders")).json || {}).producers || [];
  check(question !== null && question.startsWith(`Tombstone topic orders on node ${nsqds[0].node}?`) && producers.length === 2,
    "tombstone: asks first; dismissing keeps both producers", { question, producers: producers.length });
  await shot("topic");

  // --- channel page with clients
  await page.goto(`${base}/topics/orders/live`);
  await page.waitForSelector("#clients");
  const clientRows = await page.$$eval("#clients tbody tr", (trs) => trs.map((tr) => tr.textContent));
  check(clientRows.length === 2 && clientRows.every((r) => r.includes("nsqadmin-browser-test/1.0") && r.includes("test-consumer")), "channel page: both consumers listed with user agent", clientRows);
  for (const [i, n] of nsqds.entries()) {
    const c = findChannel(stats[i], "orders", "live");
    const cells = await cellNums(page, `#channel-nodes tr[data-node="${n.node}"]`);
    check(toNum(cells[7]) === c.message_count && toNum(cells[9]) === c.client_count, `channel page: node ${n.node} messages/connections match nsqd`, cells);
  }
  await shot("channel-with-clients");

  // --- channel page without clients; pause through the UI
  await page.goto(`${base}/topics/orders/archive`);
  await page.waitForSelector("#channel-nodes");
  for (const [i, n] of nsqds.entries()) {
    const c = findChannel(stats[i], "orders", "archive");
    const cells = await cellNums(page, `#channel-nodes tr[data-node="${n.node}"]`);
    check(toNum(cells[1]) === c.depth && cells[2] === `${c.depth - c.backend_depth} + ${c.backend_depth}` && toNum(cells[7]) === c.message_count,
      `channel page: node ${n.node} depth/memory+disk/messages match nsqd`, cells);
  }
  check((await page.textContent("#content")).includes("No clients connected to this channel"), "channel page: no-clients notice");
  await shot("channel");
  let dialogs = 0;
  page.once("dialog", (d) => { dialogs++; d.dismiss(); });
  await page.click("#pause-btn");
  await sleep(500);
  const notPaused = findChannel((await http("GET", nsqds[0].http, "/stats?format=json")).json, "orders", "archive").paused;
  check(dialogs === 1 && notPaused === false, "pause: dismissing the confirm dialog does nothing", { dialogs, notPaused });
  page.once("dialog", (d) => { dialogs++; d.accept(); });
  await page.click("#pause-btn");
  const pausedEverywhere = await waitFor("channel paused on both nsqd", async () => {
    for (const n of nsqds) {
      if (!findChannel((await http("GET", n.http, "/stats?format=json")).json, "orders", "archive").paused) { return false; }
    }
    return true;
  }, 10000).catch(() => false);
  check(dialogs === 2 && pausedEverywhere, "pause: accepting the confirm pauses the channel on both nsqd", { dialogs });
  const btn = await waitFor("button flips to UnPause", async () => ((await page.textContent("#pause-btn")) === "UnPause Channel"), 10000).catch(() => false);
  check(btn, "pause: button now reads UnPause Channel and a paused label shows");
  await shot("channel-paused");

  // --- nsq-rs replay: the action asks from when, then for a confirmation;
  // this topic is not replicated, so nothing is retained to replay, and the
  // page shows nsqd's answer saying why and what to do instead
  const replayDialogs = [];
  const onReplayDialog = (d) => { replayDialogs.push(d.type()); if (d.type() === "prompt") { d.accept("earliest"); } else { d.accept(); } };
  page.on("dialog", onReplayDialog);
  const errorsBefore = jsErrors.length;
  await page.click("#replay-btn");
  const refusal = await waitFor("the replay refusal shown", async () => {
    const t = await page.textContent("#banners");
    return t.includes("is not replicated") ? t : false;
  }, 10000).catch(() => null);
  page.off("dialog", onReplayDialog);
  // the browser logs the refusal's 400 as an error: it is the answer expected
  const replayErrors = jsErrors.splice(errorsBefore);
  jsErrors.push(...replayErrors.filter((e) => !e.includes("status of 400")));
  check(JSON.stringify(replayDialogs) === '["prompt","confirm"]' && refusal !== null,
    "replay: asks from when, confirms, and shows why an unreplicated topic has nothing to replay", { replayDialogs, refusal });
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot("channel-replay-refused");

  // --- nsq-rs settings: a channel's max attempts and depth limit, set through the form on both nsqd
  await page.waitForSelector("#channel-config");
  await page.fill('#channel-config input[name="max_attempts"]', "5");
  await page.fill('#channel-config input[name="max_depth"]', "1000");
  await page.selectOption('#channel-config select[name="max_depth_policy"]', "drop-oldest");
  await page.fill('#channel-config input[name="max_age"]', "30m");
  page.once("dialog", (d) => { dialogs++; d.accept(); });
  await page.click("#channel-config button[data-act=save-config]");
  const chSet = await waitFor("channel settings on both nsqd", async () => {
    for (const n of nsqds) {
      const c = (await http("GET", n.http, "/channel/config?topic=orders&channel=archive")).json || {};
      if (c.max_attempts !== 5 || c.max_depth !== 1000 || c.max_depth_policy !== "drop-oldest" || c.max_age !== "30m0s") { return false; }
    }
    return true;
  }, 10000).catch(() => false);
  check(chSet, "channel settings: the form sets max attempts, max depth and max age on both nsqd");
  const shownCh = await waitFor("the settings table shows them", async () => {
    const t = await page.textContent("#channel-settings");
    return t.includes("orders.archive.dead") && t.includes("drop the oldest") && t.includes("30m0s") ? t : false;
  }, 10000).catch(() => null);
  check(shownCh !== null, "channel settings: the page shows max attempts, the dead-letter topic, the limit and the max age", shownCh);
  await page.evaluate(() => window.scrollTo(0, 0)); // the fixed header at the top, not over the page
  await shot("channel-settings");

  // --- nsq-rs settings: a topic's memory queue size and depth limit
  await page.goto(`${base}/topics/orders`);
  await page.waitForSelector("#topic-config");
  await page.fill('#topic-config input[name="mem_queue_size"]', "500");
  await page.fill('#topic-config input[name="max_depth"]', "100000");
  await page.fill('#topic-config input[name="max_age"]', "1h");
  page.once("dialog", (d) => { dialogs++; d.accept(); });
  await page.click("#topic-config button[data-act=save-config]");
  const tSet = await waitFor("topic settings on both nsqd", async () => {
    for (const n of nsqds) {
      const t = (await http("GET", n.http, "/topic/config?topic=orders")).json || {};
      if (t.mem_queue_size !== 500 || t.max_depth !== 100000 || t.max_depth_policy !== "reject" || t.max_age !== "1h0m0s") { return false; }
    }
    return true;
  }, 10000).catch(() => false);
  check(tSet, "topic settings: the form sets the memory queue size, max depth and max age on both nsqd");
  const shownT = await waitFor("the topic settings table shows them", async () => {
    const t = await page.textContent("#topic-settings");
    return t.includes("500") && t.includes("100,000") && t.includes("reject publishes") && t.includes("1h0m0s") ? t : false;
  }, 10000).catch(() => null);
  check(shownT !== null, "topic settings: the page shows them", shownT);
  await page.evaluate(() => window.scrollTo(0, 0)); // the fixed header at the top, not over the page
  await shot("topic-settings");

  // --- nodes and node page
  await page.goto(`${base}/nodes`);
  await page.waitForSelector("#nodes");
  for (const n of nsqds) {
    const cells = await cellNums(page, `#nodes tr[data-node="${n.node}"]`);
    check(cells[1] === "127.0.0.1" && cells[2] === n.tcp.split(":")[1] && cells[3] === n.http.split(":")[1] && cells[4].startsWith("1.3.0"),
      `nodes page: ${n.node} addresses and version`, cells);
  }
  await shot("nodes");
  await page.goto(`${base}/nodes/${nsqds[0].node}`);
  await page.waitForSelector("#node-topics");
  for (const t of stats[0].topics) {
    const cells = await cellNums(page, `#node-topics tr.topic-row[data-topic="${t.topic_name}"]`);
    check(toNum(cells[1]) === t.depth && toNum(cells[4]) === t.message_count && toNum(cells[5]) === t.channels.length, `node page: topic ${t.topic_name} matches nsqd`, cells);
  }
  const nodeAligned = await columnsAligned(page, "#node-topics", "tr.channel-row");
  check(nodeAligned === true, "node page: every channel row's columns line up with the header's", nodeAligned);
  // the summary adds up the topic rows shown (which include the live "events" topic)
  const cardText = (await page.textContent("#cards")).replace(/,/g, "");
  const rowMsgs = await page.$$eval("#node-topics tr.topic-row", (trs) => trs.reduce((a, tr) => a + Number(tr.children[4].textContent.replace(/,/g, "")), 0));
  check(cardText.includes(`Published${rowMsgs}`) && rowMsgs >= stats[0].topics.reduce((a, t) => a + t.message_count, 0), `node page: messages summary ${rowMsgs} adds up the topics`, cardText);
  await shot("node");

  // --- lookup page: create a topic and channel
  await page.goto(`${base}/lookup`);
  await page.waitForSelector("#create");
  await page.fill("#new-topic", "planned");
  await page.fill("#new-channel", "later");
  await page.click("#create button");
  const listed = await waitFor("inactive topic listed", async () => (await page.$('#inactive tr[data-topic="planned"]')) !== null, 10000).catch(() => false);
  const lk = (await http("GET", lookupd.http, "/channels?topic=planned")).json;
  check(listed && lk && lk.channels.includes("later"), "lookup page: created topic/channel reached nsqlookupd and is listed", lk);
  await shot("lookup");

  // --- counter: the sum of every channel's message_count (after the live traffic stops)
  publishing = false;
  await publisher;
  await waitFor("events/tail drained", async () => {
    const c = findChannel((await http("GET", nsqds[0].http, "/stats?format=json")).json, "events", "tail");
    return c && c.depth === 0 && c.in_flight_count === 0;
  });
  const now = [];
  for (const n of nsqds) { now.push((await http("GET", n.http, "/stats?format=json")).json); }
  const wantTotal = now.reduce((a, s) => a + s.topics.reduce((b, t) => b + t.channels.reduce((x, c) => x + c.message_count, 0), 0), 0);
  await page.goto(`${base}/counter`);
  const shown = await waitFor("counter settles", async () => {
    const v = await page.getAttribute("#digits", "data-total");
    return v !== null && Number(v) === wantTotal ? v : false;
  }, 10000).catch(() => null);
  check(shown !== null, `counter: shows ${wantTotal} messages processed`, shown);
  await sleep(1500);
  await shot("counter");

  // --- nsq-rs replication: three members formed by their flags, registered
  // with the same nsqlookupd (nsqadmin asks the first nsqd that is a member);
  // member 4 started naming them and added through the Replication page's
  // form (confirmed), an existing id refused in the member's words, then
  // member 4 removed through its row's button (dismissed once, then confirmed)
  const rp = [];
  while (rp.length < 12) { const p = await freePort(); if (!rp.includes(p) && !ports.includes(p)) rp.push(p); }
  const members = [1, 2, 3, 4].map((id, i) => ({ id, tcp: `127.0.0.1:${rp[3 * i]}`, http: `127.0.0.1:${rp[3 * i + 1]}`, raft: `127.0.0.1:${rp[3 * i + 2]}` }));
  const formed = members.slice(0, 3).map((m) => `${m.id}@${m.raft}`).join(",");
  const memberArgs = (m) => {
    const dir = path.join(tmp, `member${m.id}`);
    fs.mkdirSync(dir);
    return [`--tcp-address=${m.tcp}`, `--http-address=${m.http}`, `--data-path=${dir}`, `--lookupd-tcp-address=${lookupd.tcp}`, "--broadcast-address=127.0.0.1",
      `--node-id=${m.id}`, `--replication-address=${m.raft}`, `--replication-peer=${formed}`, "--replication-groups=4", "--replication-election-timeout=300ms"];
  };
  for (const m of members.slice(0, 3)) { await daemon("nsqd", memberArgs(m), m.http); }
  const peersOf = async (m) => {
    const r = (await http("GET", m.http, "/replication")).json;
    return r && !r.change && r.standing === "member" ? r.peers.map((x) => x.node_id).join(",") : null;
  };
  await waitFor("three members standing", async () => {
    for (const m of members.slice(0, 3)) { if ((await peersOf(m)) !== "1,2,3") { return false; } }
    return true;
  }, 60000);
  // member 4 answers HTTP once added: started now, added once its replication listener is up
  start("nsqd", memberArgs(members[3]));
  await waitFor("member 4's replication listener", () => new Promise((resolve) => {
    const [h, p] = members[3].raft.split(":");
    const c = net.connect(Number(p), h, () => { c.destroy(); resolve(true); });
    c.on("error", () => resolve(false));
  }), 30000);
  await page.goto(`${base}/replication`);
  await page.waitForSelector("#members tr[data-member='3']", { timeout: 30000 });
  const shownMembers = await page.$$eval("#members tbody tr", (trs) => trs.map((tr) => tr.getAttribute("data-member")).join(","));
  check(shownMembers === "1,2,3", "replication page: the cluster's three members", shownMembers);
  await page.fill("#member-id", "4");
  await page.fill("#member-address", members[3].raft);
  let asked = null;
  page.once("dialog", (d) => { asked = d.message(); d.accept(); });
  await page.click("#add-member-btn");
  const added = await waitFor("the add carried out on every member", async () => {
    for (const m of members.slice(0, 3)) { if ((await peersOf(m)) !== "1,2,3,4") { return false; } }
    return true;
  }, 60000).catch(() => false);
  const addSaid = await page.textContent("#banners");
  check(added && asked && asked.includes(`Add member 4 at ${members[3].raft}`) && addSaid.includes("Member 4 added"),
    "replication page: Add member asks, then adds member 4 through nsqadmin", { asked, addSaid });
  await waitFor("member 4 answering HTTP", async () => (await http("GET", members[3].http, "/ping")).text === "OK", 30000);
  // the page refreshes into the settled cluster: four members, no change under way
  await page.waitForFunction(() => document.querySelector("#members tr[data-member='4']") && !document.getElementById("member-change"), null, { timeout: 30000 });
  await shot("replication");
  // a refusal: the member's error text, and nothing changed
  const refusalErrorsBefore = jsErrors.length;
  await page.fill("#member-id", "2");
  await page.fill("#member-address", "127.0.0.1:1");
  page.once("dialog", (d) => d.accept());
  await page.click("#add-member-btn");
  const refused = await waitFor("the refusal shown", async () => {
    const t = await page.textContent("#banners");
    return t.includes("REPLICATION_MEMBER_EXISTS") ? t : false;
  }, 20000).catch(() => null);
  // the browser logs the refusal's 409 as an error: it is the answer expected
  const refusalErrors = jsErrors.splice(refusalErrorsBefore);
  jsErrors.push(...refusalErrors.filter((e) => !e.includes("status of 409")));
  check(refused !== null && (await peersOf(members[0])) === "1,2,3,4", "replication page: adding an existing id shows the member's refusal, cluster unchanged", refused);
  // remove member 4: dismissing the confirmation does nothing, accepting removes it
  page.once("dialog", (d) => { asked = d.message(); d.dismiss(); });
  await page.click("#members button[data-act='remove-member'][data-id='4']");
  await sleep(500);
  check(asked.includes("Remove member 4") && (await peersOf(members[0])) === "1,2,3,4", "replication page: dismissing Remove member changes nothing", asked);
  page.once("dialog", (d) => d.accept());
  await page.click("#members button[data-act='remove-member'][data-id='4']");
  const removed = await waitFor("the removal carried out", async () => {
    for (const m of members.slice(0, 3)) { if ((await peersOf(m)) !== "1,2,3") { return false; } }
    return true;
  }, 60000).catch(() => false);
  const removeSaid = await page.textContent("#banners");
  check(removed && removeSaid.includes("Member 4 removed"), "replication page: Remove member removes member 4 through nsqadmin", removeSaid);

  // --- a second nsqadmin: one nsqlookupd unreachable (warning banner), admin users set (no action buttons)
  const admin2 = `127.0.0.1:${await freePort()}`;
  const dead = `127.0.0.1:${await freePort()}`;
  await daemon("nsqadmin", [`--http-address=${admin2}`, `--lookupd-http-address=${lookupd.http}`, `--lookupd-http-address=${dead}`, "--admin-user=alice"], admin2);
  await page.goto(`http://${admin2}/topics/orders`);
  await page.waitForSelector("#topic-nodes");
  const warn = await page.textContent("#banners");
  check(warn.includes("WARNING:") && warn.includes(dead), "partial failure: the page shows nsqadmin's WARNING and still renders", warn);
  check((await page.$("#actions")) === null && (await page.$("button[data-act]")) === null, "non-admin: no action buttons");
  await shot("warning-non-admin");
  await page.goto(`http://${admin2}/replication`);
  await page.waitForSelector("#members", { timeout: 30000 });
  check((await page.$("#add-member")) === null && (await page.$("#members button[data-act]")) === null, "non-admin: the replication page has no Add member form or Remove member buttons");

  check(jsErrors.length === 0, "no JavaScript errors or failed requests", jsErrors);
  await ctx.close();
}

/* Stops the daemons (SIGTERM, then SIGKILL after 10 s) and removes the temp dir once they are gone. */
async function cleanup() {
  for (const s of sockets) { s.destroy(); }
  const exited = children.map((c) => (c.exitCode !== null || c.signalCode !== null) ? Promise.resolve() : new Promise((r) => c.once("exit", r)));
  for (const c of children) { if (c.exitCode === null && c.signalCode === null) { c.kill("SIGTERM"); } }
  const killer = setTimeout(() => { for (const c of children) { if (c.exitCode === null && c.signalCode === null) { c.kill("SIGKILL"); } } }, 10000);
  await Promise.all(exited);
  clearTimeout(killer);
  if (tmp) { fs.rmSync(tmp, { recursive: true, force: true }); }
}

main().then(async () => {
  await cleanup();
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`\nscreenshots: ${OUT}\nbrowser test took ${secs}s`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}, async (e) => {
  await cleanup();
  console.error("ERROR:", e && e.stack ? e.stack : e);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
