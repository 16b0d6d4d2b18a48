// edgemu dashboard: polls /api/snapshot every second, draws the topology,
// the link table, three uPlot charts and the event log; kill/restore send
// the same control commands as `edgemu ctl` over the control websocket with
// the token typed into the page (kept in this page's memory only).
"use strict";

const POLL_MS = 1000;
const KEEP_POINTS = 180;
const SVGNS = "http://www.w3.org/2000/svg";

const state = {
  since: new Map(),  // host -> next event number to ask it for
  prev: new Map(),   // "link/dir" -> previous counters for interval figures
  handoffs: new Map(), // "sender#k" -> a KV handoff, from the agents' events
  keys: null,        // ordered "link/dir" keys the charts were built for
  charts: null,
  data: null,        // uPlot data arrays per chart
  topology: null,
  ws: null,
  wsReady: null,
  nextId: 1,
  pending: new Map(),
  lastOk: 0,
};

const $ = (sel) => document.querySelector(sel);
const fmtRate = (bps) => bps == null ? "–" : bps >= 1e9 ? (bps / 1e9).toFixed(2) + " Gb/s"
  : bps >= 1e6 ? (bps / 1e6).toFixed(2) + " Mb/s" : bps >= 1e3 ? (bps / 1e3).toFixed(1) + " kb/s" : bps.toFixed(0) + " b/s";
const fmtMs = (ns) => ns == null || Number.isNaN(ns) ? "–" : (ns / 1e6).toFixed(2) + " ms";
const fmtPct = (x) => x == null || Number.isNaN(x) ? "–" : (100 * x).toFixed(2) + " %";

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text != null) e.textContent = text;
  return e;
}

// ---- commands over the control websocket ----------------------------------

function setStatus(text, cls) {
  const s = $("#cmd-status");
  s.textContent = text;
  s.className = cls || "";
}

function connect() {
  if (state.ws && state.ws.readyState <= 1) return state.wsReady;
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(proto + "//" + location.host + "/");
  state.ws = ws;
  state.wsReady = new Promise((resolve, reject) => {
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error("control websocket failed"));
  });
  ws.onmessage = (m) => {
    let v;
    try { v = JSON.parse(m.data); } catch (_) { return; }
    const p = state.pending.get(v.id);
    if (p) { state.pending.delete(v.id); p(v); }
  };
  ws.onclose = () => {
    for (const p of state.pending.values()) p({ ok: false, error: "connection closed" });
    state.pending.clear();
    state.ws = null;
  };
  return state.wsReady;
}

async function command(req) {
  const token = $("#token").value;
  const id = state.nextId++;
  const ws = await connect();
  const reply = new Promise((resolve) => state.pending.set(id, resolve));
  ws.send(JSON.stringify(Object.assign({ id, token }, req)));
  const timeout = new Promise((resolve) => setTimeout(() => resolve({ ok: false, error: "no reply within 15 s" }), 15000));
  return Promise.race([reply, timeout]);
}

async function linkCommand(cmd, link, dir) {
  setStatus(`${cmd} ${link} ${dir} …`);
  try {
    const r = await command({ cmd, link, dir });
    if (r.ok) {
      const applied = (r.result && r.result.applied || []).map((a) => `${a.target} on ${a.host}`).join(", ");
      setStatus(`${cmd}: ${applied || "done"}`, "ok");
    } else {
      setStatus(`${cmd} refused: ${r.error}`, "err");
    }
  } catch (e) {
    setStatus(`${cmd} failed: ${e.message}`, "err");
  }
  poll();
}

// ---- topology ---------------------------------------------------------------

function drawTopology(topo, linkState) {
  const root = $("#topology");
  root.replaceChildren();
  const width = root.clientWidth || 900;
  const height = 220;
  root.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const hosts = topo.hosts;
  const colW = width / Math.max(hosts.length, 1);
  const pos = new Map();
  // Within a host, actors that send over a link sit on the left, the rest on
  // the right, so that links between actors of one host do not overlap.
  const senders = new Set(topo.links.map((l) => l.a));
  hosts.forEach((h, i) => {
    const g = svg("g", { class: "host" });
    g.appendChild(svg("rect", { x: i * colW + 8, y: 8, width: colW - 16, height: height - 16, rx: 8 }));
    const ctl = h.control ? ` (${h.control})` : "";
    g.appendChild(svg("text", { class: "hname", x: i * colW + 18, y: 28 }, h.name + ctl));
    root.appendChild(g);
    const actors = topo.actors.filter((a) => a.host === h.name);
    const sides = [actors.filter((a) => senders.has(a.name)), actors.filter((a) => !senders.has(a.name))];
    sides.forEach((side, k) => {
      side.forEach((a, j) => {
        const x = i * colW + colW * (k === 0 ? 0.22 : 0.62);
        const y = 50 + (j + 0.5) * ((height - 70) / Math.max(side.length, 1));
        pos.set(a.name, { x, y, host: i });
      });
    });
  });
  for (const l of topo.links) {
    const a = pos.get(l.a), b = pos.get(l.b);
    if (!a || !b) continue;
    const dirs = ["ab", "ba"].map((d) => linkState.get(`${l.name}/${d}`));
    const known = dirs.filter((s) => s != null);
    const cls = known.length === 0 ? "unknown" : known.every((s) => s) ? "up" : "down";
    const x1 = a.x, y1 = a.y, x2 = b.x, y2 = b.y;
    root.appendChild(svg("line", { x1, y1, x2, y2, class: cls, "data-link": l.name }));
    const label = known.length === 0 ? "" : cls === "up" ? "" : " (down)";
    root.appendChild(svg("text", { x: x1 + (x2 - x1) * 0.45, y: y1 + (y2 - y1) * 0.45 - 6 }, l.name + label));
  }
  for (const a of topo.actors) {
    const p = pos.get(a.name);
    if (!p) continue;
    root.appendChild(svg("circle", { cx: p.x, cy: p.y, r: 7 }));
    root.appendChild(svg("text", { x: p.x + 12, y: p.y + 4 }, `${a.name} · ${a.kind}`));
  }
}

// ---- charts -----------------------------------------------------------------

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

function makeCharts(keys) {
  const width = () => Math.max(($("#chart-rate").clientWidth || 440) - 10, 300);
  const mk = (target, series) => new uPlot({
    width: width(), height: 220,
    scales: { x: { time: false } },
    axes: [{ label: "run time (s)" }, {}],
    legend: { live: false },
    series: [{ label: "t" }].concat(series),
  }, [[]].concat(series.map(() => [])), $(target));
  const rateSeries = [];
  keys.forEach((k, i) => {
    const c = PALETTE[i % PALETTE.length];
    rateSeries.push({ label: `${k} achieved`, stroke: c, width: 2 });
    rateSeries.push({ label: `${k} configured`, stroke: c, width: 1, dash: [6, 4] });
  });
  const per = (suffix) => keys.map((k, i) => ({ label: `${k}${suffix}`, stroke: PALETTE[i % PALETTE.length], width: 2 }));
  state.charts = {
    rate: mk("#chart-rate", rateSeries),
    delay: mk("#chart-delay", per("")),
    loss: mk("#chart-loss", per("")),
  };
  state.data = {
    rate: [[]].concat(rateSeries.map(() => [])),
    delay: [[]].concat(keys.map(() => [])),
    loss: [[]].concat(keys.map(() => [])),
  };
}

function pushPoint(name, t, values) {
  const d = state.data[name];
  d[0].push(t);
  values.forEach((v, i) => d[i + 1].push(v));
  if (d[0].length > KEEP_POINTS) d.forEach((a) => a.shift());
  state.charts[name].setData(d);
}

// ---- link table ---------------------------------------------------------------

function linkRow(key, l, fig) {
  let row = document.querySelector(`#links tr[data-link="${CSS.escape(key)}"]`);
  if (!row) {
    row = el("tr", { "data-link": key });
    const cells = ["name", "dir", "host", "state", "configured", "achieved", "delay", "p99", "loss",
      "offered", "delivered", "lost", "queue_dropped", "down_dropped"];
    for (const c of cells) row.appendChild(el("td", { class: c }));
    const act = el("td", { class: "actions" });
    const kill = el("button", { class: "kill", type: "button", "data-link": l.name, "data-dir": l.dir }, "kill");
    const restore = el("button", { class: "restore", type: "button", "data-link": l.name, "data-dir": l.dir }, "restore");
    kill.addEventListener("click", () => linkCommand("link.kill", l.name, l.dir));
    restore.addEventListener("click", () => linkCommand("link.restore", l.name, l.dir));
    act.append(kill, " ", restore);
    row.appendChild(act);
    $("#links tbody").appendChild(row);
  }
  const set = (c, v) => { row.querySelector("." + c).textContent = v; };
  set("name", l.name);
  set("dir", l.dir);
  set("host", l.host);
  const st = row.querySelector(".state");
  st.textContent = l.up ? "up" : "down";
  st.className = "state " + (l.up ? "up" : "down");
  set("configured", fmtRate(l.rate_bps));
  set("achieved", fmtRate(fig.achieved));
  set("delay", fmtMs(fig.delay));
  set("p99", l.delivered > 0 ? fmtMs(l.delay_p99_ns) : "–");
  set("loss", fmtPct(fig.loss));
  for (const c of ["offered", "delivered", "lost", "queue_dropped", "down_dropped"]) set(c, l[c].toLocaleString());
  row.querySelector("button.kill").disabled = !l.up;
  row.querySelector("button.restore").disabled = l.up;
}

// ---- events -----------------------------------------------------------------

function addEvents(events, host) {
  const list = $("#events");
  events.sort((a, b) => a.t_ns - b.t_ns);
  for (const e of events) {
    const li = el("li", { "data-kind": e.kind, "data-seq": e.seq });
    li.appendChild(el("span", { class: "t" }, `${(e.t_ns / 1e9).toFixed(3)} s `));
    li.appendChild(el("span", { class: "kind" }, e.kind));
    li.appendChild(el("span", {}, ` · ${e.source} @ ${e.host} `));
    li.appendChild(el("span", { class: "detail" }, JSON.stringify(e.detail)));
    list.prepend(li);
    state.since.set(host, Math.max(state.since.get(host) || 0, e.seq + 1));
    if (e.kind.startsWith("handoff.")) noteHandoff(e);
  }
  while (list.children.length > 200) list.lastChild.remove();
}

// ---- handoffs (from the agents' events) ------------------------------------

// The sender logs handoff.start / .sent / .abort (side sender) on its host,
// the receiver handoff.done / .abort (side receiver, with `from`) on its own.
function noteHandoff(e) {
  const d = e.detail || {};
  if (d.handoff == null) return;
  const sender = e.kind === "handoff.done" || d.side === "receiver" ? d.from : e.source;
  const key = `${sender}#${d.handoff}`;
  const h = state.handoffs.get(key) || { from: sender, k: d.handoff, state: "sending" };
  if (e.kind === "handoff.start") {
    Object.assign(h, { t_ns: e.t_ns, to: d.to, scheme: d.scheme, policy: d.policy, rho: d.rho, hit: d.cache_hit });
  } else if (e.kind === "handoff.sent") {
    Object.assign(h, { sent: d.source_sent + d.repair_sent, repairs: d.repair_sent });
    if (h.state === "sending") h.state = "sent";
  } else if (e.kind === "handoff.done") {
    Object.assign(h, { state: d.outcome, utility: d.utility, ttft: d.ttft_ms, tokens: d.tokens });
  } else if (e.kind === "handoff.abort") {
    h.state = `aborted (${d.side}): ${d.reason}`;
  }
  state.handoffs.set(key, h);
  while (state.handoffs.size > 50) state.handoffs.delete(state.handoffs.keys().next().value);
}

function drawHandoffs() {
  const all = [...state.handoffs.values()].sort((a, b) => (b.t_ns || 0) - (a.t_ns || 0)).slice(0, 12);
  const body = panelBody("handoffs", all.length > 0);
  if (!all.length) return;
  const num = (v, f) => v == null ? "–" : f(v);
  body.replaceChildren(table(
    ["start s", "agents", "scheme / policy", "ρ", "cache", "packets (repair)", "state", "utility", "TTFT ms", "tokens"],
    all.map((h) => [
      num(h.t_ns, (t) => (t / 1e9).toFixed(1)),
      `${h.from} → ${h.to || "?"}`,
      `${h.scheme || "?"} / ${h.policy || "?"}`,
      num(h.rho, (r) => r.toFixed(2)),
      h.hit == null ? "–" : h.hit ? "hit" : "miss",
      h.sent == null ? "–" : `${h.sent} (${h.repairs})`,
      h.state.startsWith("aborted") ? el("span", { class: "state down" }, h.state) : h.state,
      num(h.utility, (u) => (100 * u).toFixed(1) + " %"),
      num(h.ttft, (t) => t.toFixed(1)),
      num(h.tokens, String),
    ])));
}

// ---- polling ----------------------------------------------------------------

// The snapshot of another host, from its own control address (its link
// directions live there). An unspecified address (0.0.0.0, [::]) is taken
// to be reachable under the name this page was loaded from.
async function remoteSnapshot(host) {
  const [, ip, port] = /^(.*):(\d+)$/.exec(host.control) || [];
  if (!port) return null;
  const name = ip === "0.0.0.0" || ip === "[::]" ? location.hostname : ip;
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 900);
  try {
    const r = await fetch(`http://${name}:${port}/api/snapshot?since=${state.since.get(host.name) || 0}`,
      { cache: "no-store", signal: ctl.signal });
    return r.ok ? await r.json() : null;
  } catch (_) {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

async function poll() {
  let s;
  try {
    const r = await fetch(`/api/snapshot?since=${state.since.get("") || 0}`, { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    s = await r.json();
  } catch (e) {
    const live = $("#live");
    live.textContent = `no answer from the host (${e.message})`;
    live.className = "stale";
    return;
  }
  state.lastOk = Date.now();
  $("#run-name").textContent = s.run;
  $("#host-name").textContent = s.host;
  const t = s.t_ns / 1e9;
  $("#run-time").textContent = t.toFixed(1);
  $("#run-duration").textContent = ` of ${(s.duration_ns / 1e9).toFixed(0)}`;
  const live = $("#live");
  live.textContent = "live";
  live.className = "fresh";

  // Every link direction of the run, whichever host carries it: this
  // host's from its snapshot, the others' from their control addresses.
  const others = s.topology.hosts.filter((h) => h.name !== s.host && h.control);
  const remote = await Promise.all(others.map(remoteSnapshot));
  let links = s.links.map((l) => Object.assign({ host: s.host }, l));
  let delays = s.delay.slice();
  addEvents(s.events.slice(), "");
  remote.forEach((r, i) => {
    if (!r) return;
    links = links.concat(r.links.map((l) => Object.assign({ host: r.host }, l)));
    delays = delays.concat(r.delay);
    addEvents(r.events.slice(), others[i].name);
  });
  links.sort((a, b) => (a.name + a.dir).localeCompare(b.name + b.dir));
  const keys = s.topology.links.flatMap((l) => [`${l.name}/ab`, `${l.name}/ba`]).sort();
  const byKey = new Map(links.map((l) => [`${l.name}/${l.dir}`, l]));
  if (!state.charts || keys.join() !== state.keys.join()) {
    for (const id of ["#chart-rate", "#chart-delay", "#chart-loss"]) $(id).replaceChildren();
    state.keys = keys;
    makeCharts(keys);
  }
  const delayByKey = new Map(delays.map((h) => [`${h.link}/${h.dir}`, h]));
  const rate = [], delay = [], loss = [];
  const upState = new Map();
  keys.forEach((key) => {
    const l = byKey.get(key);
    if (!l) {
      rate.push(null, null);
      delay.push(null);
      loss.push(null);
      return;
    }
    const h = delayByKey.get(`${l.link}/${l.dir}`) || { count: 0, sum_ns: 0 };
    const p = state.prev.get(key);
    const fig = { achieved: null, delay: null, loss: null };
    if (p && l.t_ns > p.t_ns) {
      const dt = (l.t_ns - p.t_ns) / 1e9;
      fig.achieved = (l.bytes_delivered - p.bytes) * 8 / dt;
      const dn = h.count - p.count;
      fig.delay = dn > 0 ? (h.sum_ns - p.sum_ns) / dn : null;
      const off = l.offered - p.offered;
      fig.loss = off > 0 ? (l.lost + l.queue_dropped + l.down_dropped - p.dropped) / off : null;
    }
    state.prev.set(key, {
      t_ns: l.t_ns, bytes: l.bytes_delivered, count: h.count, sum_ns: h.sum_ns,
      offered: l.offered, dropped: l.lost + l.queue_dropped + l.down_dropped,
    });
    rate.push(fig.achieved == null ? null : fig.achieved / 1e6, l.rate_bps == null ? null : (l.up ? l.rate_bps / 1e6 : 0));
    delay.push(fig.delay == null ? null : fig.delay / 1e6);
    loss.push(fig.loss == null ? null : 100 * fig.loss);
    upState.set(key, l.up);
    linkRow(key, l, fig);
  });
  pushPoint("rate", t, rate);
  pushPoint("delay", t, delay);
  pushPoint("loss", t, loss);
  drawTopology(s.topology, upState);
  // LYREO servers and schedulers of every host (each host shows its own).
  const merged = { servers: {}, scheduler: {}, external: {}, load: {} };
  for (const snap of [s].concat(remote.filter((r) => r))) {
    if (snap.load) merged.load[snap.host] = snap.load;
    Object.assign(merged.servers, snap.servers || {});
    Object.assign(merged.scheduler, snap.scheduler || {});
    Object.assign(merged.external, snap.external || {});
  }
  drawServers(merged.servers);
  drawScheduler(merged.scheduler);
  drawExternal(merged.external);
  drawLoad(merged.load);
  drawHandoffs();
}

function panelBody(name, has) {
  const sec = document.querySelector(`[data-panel="${name}"]`);
  const na = sec.querySelector(".na");
  if (na) na.hidden = has;
  let body = sec.querySelector(".live");
  if (!body) {
    body = el("div", { class: "live" });
    sec.appendChild(body);
  }
  body.hidden = !has;
  return body;
}

const fmtBytes = (b) => b >= 1e9 ? (b / 1e9).toFixed(2) + " GB" : b >= 1e6 ? (b / 1e6).toFixed(1) + " MB"
  : b >= 1e3 ? (b / 1e3).toFixed(1) + " kB" : b + " B";

function table(head, rows) {
  const t = el("table");
  const tr = el("tr");
  head.forEach((h) => tr.appendChild(el("th", {}, h)));
  t.appendChild(el("thead")).appendChild(tr);
  const tb = t.appendChild(el("tbody"));
  rows.forEach((r) => {
    const row = el("tr");
    r.forEach((c) => row.appendChild(c instanceof Node ? el("td").appendChild(c).parentNode : el("td", {}, String(c))));
    tb.appendChild(row);
  });
  return t;
}

function drawServers(servers) {
  const names = Object.keys(servers).sort();
  const body = panelBody("servers", names.length > 0);
  if (!names.length) return;
  body.replaceChildren(table(
    ["server", "GPU / backend", "KV now", "KV peak (slot)", "batch", "backlog", "η_s", "high-KV slots", "served / rejected"],
    names.map((n) => {
      const v = servers[n];
      const pct = (b) => v.capacity_bytes ? (100 * b / v.capacity_bytes).toFixed(2) + " %" : "–";
      const peak = el("span", { class: v.capacity_bytes && v.peak_bytes > 0.9 * v.capacity_bytes ? "state down" : "" },
        `${fmtBytes(v.peak_bytes)} (${pct(v.peak_bytes)})`);
      // Killed (`actor.kill`) and not restarted yet.
      const name = v.down ? el("span", { class: "state down" }, `${n} (down)`) : n;
      return [name, `${v.gpu} / ${v.backend}`, `${fmtBytes(v.occupancy_bytes)} (${pct(v.occupancy_bytes)})`, peak,
        v.running, v.backlog, v.eta.toFixed(4), `${v.high_kv_slots} / ${v.slots}`, `${v.served} / ${v.rejected}`];
    })));
}

// Each host's load probe: a host whose timers fall late delays its links,
// slots and decisions (docs/dashboard.md).
function drawLoad(load) {
  const names = Object.keys(load).sort();
  const body = panelBody("load", names.length > 0);
  if (!names.length) return;
  body.replaceChildren(table(
    ["host", "timer late p50 / p99 / max ms", "ticks > 10 ms late", "CPU cores"],
    names.map((n) => {
      const v = load[n];
      const late = el("span", { class: v.timer_late_p99_ms > 10 ? "state down" : "" },
        `${v.timer_late_p50_ms.toFixed(2)} / ${v.timer_late_p99_ms.toFixed(2)} / ${v.timer_late_max_ms.toFixed(1)}`);
      return [n, late, `${v.late_ticks} / ${v.ticks}`, v.cpu_cores.toFixed(2)];
    })));
}

// Deciders that asked a policy process (docs/external-policy.md).
function drawExternal(ext) {
  const names = Object.keys(ext).sort();
  const body = panelBody("external", names.length > 0);
  if (!names.length) return;
  const ms = (us) => (us / 1000).toFixed(2);
  body.replaceChildren(table(
    ["decider", "problem", "connected", "decisions", "answered", "timeout", "error", "malformed", "disconnected", "late", "rtt p50 / p99 ms"],
    names.map((n) => {
      const v = ext[n];
      const up = el("span", { class: v.connected ? "state up" : "state down", title: v.url }, v.connected ? "up" : "down");
      return [n, v.problem, up, v.decisions, v.answered, v.timeout, v.error, v.malformed, v.disconnected, v.late,
        v.rtt_count ? `${ms(v.rtt_p50_us)} / ${ms(v.rtt_p99_us)}` : "–"];
    })));
}

function drawScheduler(scheds) {
  const names = Object.keys(scheds).sort();
  const body = panelBody("scheduler", names.length > 0);
  const pol = panelBody("policy", names.length > 0);
  if (!names.length) return;
  body.replaceChildren(...names.map((n) => {
    const v = scheds[n];
    const servers = Object.keys(v.servers).sort();
    return el("div", {}, "").appendChild(table(
      ["scheduler", "server", "assigned", "Z_s"],
      servers.map((sv) => [n,
        v.servers[sv].unavailable ? el("span", { class: "state down" }, `${sv} (unavailable)`) : sv,
        v.servers[sv].assigned, v.servers[sv].z.toFixed(5)]))).parentNode;
  }));
  pol.replaceChildren(...names.map((n) => {
    const v = scheds[n];
    const row = el("div", { class: "policy-row" });
    row.appendChild(el("span", {}, `${n}: `));
    row.appendChild(el("b", { class: "policy-name" }, v.policy));
    row.appendChild(el("code", { title: v.version }, ` ${v.version.slice(0, 12)}`));
    row.appendChild(el("span", {}, ` · slot ${v.slot}, ${v.decisions} decisions `));
    const input = el("input", { class: "policy-input", placeholder: "least-loaded, random, lyreo, …", size: 18 });
    const swap = el("button", { class: "swap" }, "swap");
    swap.addEventListener("click", () => policyCommand({ cmd: "policy.swap", actor: n, policy: input.value.trim() }));
    const back = el("button", { class: "rollback" }, "rollback");
    back.addEventListener("click", () => policyCommand({ cmd: "policy.rollback", actor: n }));
    row.append(input, swap, back);
    return row;
  }));
}

async function policyCommand(req) {
  setStatus(`${req.cmd} ${req.actor} …`);
  try {
    const r = await command(req);
    if (r.ok) setStatus(`${req.cmd} ${req.actor}: ${JSON.stringify(r.result)}`, "ok");
    else setStatus(`${req.cmd} refused: ${r.error}`, "err");
  } catch (e) {
    setStatus(`${req.cmd} failed: ${e.message}`, "err");
  }
  poll();
}

$("#auth").addEventListener("submit", (e) => e.preventDefault());
setInterval(() => {
  poll();
  if (state.lastOk && Date.now() - state.lastOk > 3 * POLL_MS) {
    $("#live").className = "stale";
  }
}, POLL_MS);
poll();
