// nsqadmin at scale: /api response times and page loads with many topics.
//
// Starts nsqlookupd, NSQDS nsqds (default 3) and nsqadmin from the given
// binaries on free 127.0.0.1 ports, creates TOPICS topics (default 1000) on
// every nsqd, each with one channel and a few messages, waits for two history
// samples, then measures:
//   - every /api call a page makes: median and max wall time of 5 calls, and
//     the response size;
//   - every page in headless Chromium: time from navigation start until the
//     page is drawn, taken in the page; for the pages that list topics both
//     the first screen (the paint of the table's first row) and the table
//     with all TOPICS rows; median of 3.
// A benchmark, not a test: it reports figures and asserts nothing about them.
// Everything it starts is stopped and its temp dir removed at the end.
//
// usage: node bench_topics.js <bin dir> [TOPICS] [NSQDS]
// NSQADMIN_STATIC=crates/nsqadmin/static serves the UI from that directory
// (nsqadmin's --dev-static-dir) instead of the copy built into the binary.
"use strict";

const { chromium } = require("playwright-core");
const { spawn } = require("child_process");
const fs = require("fs");
const net = require("net");
const os = require("os");
const path = require("path");

const BIN = process.argv[2];
const TOPICS = Number(process.argv[3] || 1000);
const NSQDS = Number(process.argv[4] || 3);
const children = [];
let tmp = null;

function log(...a) { console.log(...a); }
function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

async function http(method, addr, p, body) {
  const r = await fetch(`http://${addr}${p}`, { method, body });
  const text = await r.text();
  return { status: r.status, text };
}

async function waitFor(what, fn, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try { if (await fn()) { return; } } catch (e) { /* not yet */ }
    await sleep(200);
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function daemon(name, args, httpAddr) {
  const fd = fs.openSync(path.join(tmp, `${name}-${children.length}.log`), "w");
  children.push(spawn(path.join(BIN, name), args, { stdio: ["ignore", fd, fd] }));
  await waitFor(`${name} /ping`, async () => (await http("GET", httpAddr, "/ping")).text === "OK", 20000);
}

/* Runs fn over items, `width` at a time. */
async function pool(items, width, fn) {
  let i = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (i < items.length) { const item = items[i++]; await fn(item); }
  }));
}

function median(xs) { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; }

async function main() {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "nsqadmin-bench-"));
  const port = async () => `127.0.0.1:${await freePort()}`;
  const lookupd = { tcp: await port(), http: await port() };
  await daemon("nsqlookupd", [`--tcp-address=${lookupd.tcp}`, `--http-address=${lookupd.http}`], lookupd.http);
  const nsqds = [];
  for (let i = 0; i < NSQDS; i++) {
    const n = { tcp: await port(), http: await port() };
    const dir = path.join(tmp, `nsqd${i}`);
    fs.mkdirSync(dir);
    await daemon("nsqd", [`--tcp-address=${n.tcp}`, `--http-address=${n.http}`, `--data-path=${dir}`,
      `--lookupd-tcp-address=${lookupd.tcp}`, "--broadcast-address=127.0.0.1"], n.http);
    nsqds.push(n);
  }
  const admin = await port();
  await daemon("nsqadmin", [`--http-address=${admin}`, `--lookupd-http-address=${lookupd.http}`,
    ...(process.env.NSQADMIN_STATIC ? [`--dev-static-dir=${process.env.NSQADMIN_STATIC}`] : [])], admin);

  const names = Array.from({ length: TOPICS }, (_, i) => `topic${String(i).padStart(4, "0")}`);
  const t0 = Date.now();
  const work = [];
  for (const n of nsqds) { for (const t of names) { work.push([n, t]); } }
  await pool(work, 32, async ([n, t]) => {
    await http("POST", n.http, `/topic/create?topic=${t}`);
    await http("POST", n.http, `/channel/create?topic=${t}&channel=ch`);
    await http("POST", n.http, `/mpub?topic=${t}`, "a\nb\nc");
  });
  log(`created ${TOPICS} topics x ${NSQDS} nsqds (1 channel, 3 messages each) in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
  await waitFor("every topic on nsqlookupd", async () => JSON.parse((await http("GET", lookupd.http, "/topics")).text).topics.length === TOPICS);
  const samples = async () => (JSON.parse((await http("GET", admin, "/api/history")).text).cluster.ts || []).length;
  const s0 = await samples();
  await waitFor("two history samples", async () => (await samples()) >= s0 + 2, 60000);

  const node = nsqds[0].http;
  const calls = [
    ["index", "/api/topics"], ["index", "/api/history?points=90"],
    ["topic", `/api/topics/${names[0]}`], ["topic", `/api/history/topics/${names[0]}?points=240`],
    ["channel", `/api/topics/${names[0]}/ch`],
    ["nodes", "/api/nodes"], ["node", `/api/nodes/${node}`],
    ["lookup", "/api/topics?inactive=true"], ["counter", "/api/counter"], ["counter", "/api/history?points=240"],
  ];
  log(`\n/api (5 calls each; median / max wall time, response size)`);
  for (const [page, p] of calls) {
    const ms = [];
    let size = 0;
    for (let i = 0; i < 5; i++) {
      const s = performance.now();
      const r = await http("GET", admin, p);
      ms.push(performance.now() - s);
      if (r.status !== 200) { throw new Error(`${p}: ${r.status} ${r.text.slice(0, 200)}`); }
      size = r.text.length;
    }
    log(`  ${page.padEnd(8)} ${p.padEnd(44)} ${median(ms).toFixed(0).padStart(5)} / ${Math.max(...ms).toFixed(0).padStart(5)} ms  ${(size / 1024).toFixed(0).padStart(6)} KiB`);
  }

  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
  });
  // Each page is ready when `cond` (run in the page) holds; the time is
  // taken in the page from navigation start, so the harness's polling adds
  // nothing: for "first screen", the paint of the table's first row (Element
  // Timing), and otherwise the first frame after the DOM change that made
  // `cond` hold.
  const rows = (sel, n) => `() => document.querySelectorAll(${JSON.stringify(sel)}).length >= ${n}`;
  const firstRow = (sel) => ({ paint: sel });
  const pageTests = [
    ["/", "index: first screen", firstRow("#topics-table tbody tr[data-topic]")],
    ["/", "index: every topic row", rows("#topics-table tbody tr[data-topic]", TOPICS)],
    [`/topics/${names[0]}`, "topic page", rows("#topic-nodes tbody tr[data-node]", NSQDS)],
    [`/topics/${names[0]}/ch`, "channel page", rows("#channel-nodes tbody tr[data-node]", NSQDS)],
    ["/nodes", "nodes page", rows("#nodes tbody tr[data-node]", NSQDS)],
    [`/nodes/${node}`, "node page: first screen", firstRow("#node-topics tr.topic-row")],
    [`/nodes/${node}`, "node page: every topic row", rows("#node-topics tr.topic-row", TOPICS)],
    ["/lookup", "lookup page", rows("#create", 1)],
    ["/counter", "counter page", `() => !!document.querySelector("#digits[data-total]")`],
  ];
  log(`\npages in headless Chromium (navigation start to the page drawn, taken in the page; median of 3, all 3)`);
  for (const [url, what, cond] of pageTests) {
    const ms = [];
    for (let i = 0; i < 3; i++) {
      const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      await ctx.addInitScript((c) => {
        if (c.paint) {
          new PerformanceObserver((list) => {
            for (const e of list.getEntries()) {
              if (e.identifier === "bench" && window.__readyAt === undefined) { window.__readyAt = e.renderTime || e.loadTime; }
            }
          }).observe({ type: "element", buffered: true });
          const obs = new MutationObserver(() => {
            const el = document.querySelector(c.paint);
            if (el) {
              obs.disconnect();
              [el, ...el.querySelectorAll("*")].forEach((x) => x.setAttribute("elementtiming", "bench"));
            }
          });
          obs.observe(document, { childList: true, subtree: true });
          return;
        }
        const holds = new Function(`return (${c.cond})();`);
        const obs = new MutationObserver(() => {
          if (window.__readyAt === undefined && holds()) {
            window.__readyAt = null;
            obs.disconnect();
            requestAnimationFrame(() => setTimeout(() => { window.__readyAt = performance.now(); }, 0));
          }
        });
        obs.observe(document, { childList: true, subtree: true, attributes: true });
      }, typeof cond === "string" ? { cond } : cond);
      const pg = await ctx.newPage();
      const errors = [];
      pg.on("pageerror", (e) => errors.push(e.message));
      await pg.goto(`http://${admin}${url}`);
      await pg.waitForFunction(() => typeof window.__readyAt === "number", null, { timeout: 30000, polling: 50 });
      ms.push(await pg.evaluate(() => window.__readyAt));
      if (errors.length) { throw new Error(`${url}: ${errors.join("; ")}`); }
      await ctx.close();
    }
    log(`  ${what.padEnd(28)} ${url.padEnd(32)} ${median(ms).toFixed(0).padStart(5)} ms  (${ms.map((x) => x.toFixed(0)).join(", ")})`);
  }
  await browser.close();
}

async function cleanup() {
  const exited = children.map((c) => (c.exitCode !== null || c.signalCode !== null) ? Promise.resolve() : new Promise((r) => c.once("exit", r)));
  for (const c of children) { if (c.exitCode === null && c.signalCode === null) { c.kill("SIGTERM"); } }
  const killer = setTimeout(() => { for (const c of children) { if (c.exitCode === null && c.signalCode === null) { c.kill("SIGKILL"); } } }, 10000);
  await Promise.all(exited);
  clearTimeout(killer);
  if (tmp) { fs.rmSync(tmp, { recursive: true, force: true }); }
}

main().then(async () => { await cleanup(); }, async (e) => {
  await cleanup();
  console.error("ERROR:", e && e.stack ? e.stack : e);
  process.exit(1);
});
