// The operator dashboard: Preact components written with htm (tagged
// templates, so no JSX step and nothing but esbuild to build).
import { h, render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import "@xterm/xterm/css/xterm.css";
import "./style.css";
import { ago, api, bytes, call, canWrite, conn, isAdmin, live, loadMe, onConn, request, signIn, signOut, who, type Kind, type Me } from "./api";
import { Audit, Tokens } from "./admin";
import type { components } from "./api";
import { LiveTerminal, type TermState } from "./term";

const html = htm.bind(h);
type S = components["schemas"];

// ---- routing: #/view/arg…
// leaveGuard, while set, is asked before the page leaves its view: it
// returns true when it holds the page there (and asks the operator, then
// goes on with go or setting location.hash itself).
let leaveGuard: ((to: string) => boolean) | null = null;

function useRoute(): string[] {
  const parse = () => (location.hash.replace(/^#\/?/, "") || "overview").split("/").map(decodeURIComponent);
  const [r, setR] = useState(parse());
  useEffect(() => {
    const f = () => { if (!leaveGuard?.(location.hash)) setR(parse()); };
    addEventListener("hashchange", f);
    return () => removeEventListener("hashchange", f);
  }, []);
  return r;
}
const go = (...parts: string[]) => (location.hash = "#/" + parts.map(encodeURIComponent).join("/"));

function useConn() {
  const [, force] = useState(0);
  useEffect(() => onConn(() => force((n) => n + 1)), []);
  return conn;
}

// useLive keeps the result of f fresh while the view is shown: reloaded
// when the server's change stream names one of kinds (and every `every` ms).
function useLive<T>(kinds: Kind[], f: () => Promise<T | undefined>, deps: unknown[] = [], every = 30000): T | undefined {
  const [v, setV] = useState<T | undefined>(undefined);
  useEffect(() => live(kinds, async () => { const r = await f(); if (r !== undefined) setV(r); }, every), deps);
  return v;
}

function Err({ e }: { e?: { error?: string } | string }) {
  if (!e) return null;
  return html`<p class="error" role="alert">${typeof e === "string" ? e : e.error}</p>`;
}

// The page's return address (/?next=…), read once: where a sign-in goes on
// to. Only this origin's preview sign-in (the preview adapter's
// /preview-signin?host=…&next=…, which sends the browser on to the preview
// host it names) is taken; anything else is refused ("") and dropped from
// the address, so the dashboard never redirects elsewhere.
const returnTo: string | null = (() => {
  const next = new URLSearchParams(location.search).get("next");
  if (next === null) return null;
  let ok = "";
  if (next.startsWith("/preview-signin?")) {
    try {
      const u = new URL(next, location.origin);
      if (u.origin === location.origin && u.pathname === "/preview-signin") ok = u.pathname + u.search;
    } catch { /* refused */ }
  }
  if (!ok) history.replaceState(null, "", location.pathname + location.hash);
  return ok;
})();

function goOn() {
  if (returnTo) location.replace(returnTo);
}

function SignIn() {
  const [token, setToken] = useState("");
  const [err, setErr] = useState("");
  const submit = async (ev: Event) => {
    ev.preventDefault();
    const e = await signIn(token.trim());
    if (e) setErr(e);
    else { setToken(""); goOn(); }
  };
  return html`<main class="signin"><form onSubmit=${submit}>
    <h1>agentic-sandbox</h1>
    ${returnTo ? html`<p class="hint" data-testid="signin-for-preview">Sign in to open the preview; you go on to it once signed in.</p>` : ""}
    <label for="token">Token</label>
    <input id="token" type="password" autocomplete="current-password" data-testid="signin-token" value=${token} onInput=${(e: any) => setToken(e.target.value)} />
    <button type="submit" data-testid="signin-submit">Sign in</button>
    <${Err} e=${err} />
    <p class="hint">The operator token (in <code>${"<data dir>/operator-token"}</code> or AGENTIC_OPERATOR_TOKEN), or a named token
      (<code>agenticctl token create</code>): the dashboard then shows what its role may do.</p>
  </form></main>`;
}

const views: [string, string][] = [["overview", "Overview"], ["agents", "Agents"], ["environments", "Environments"], ["sessions", "Sessions"],
  ["missions", "Missions"], ["tasks", "Tasks"], ["hitl", "HITL inbox"]];

// The views only an admin sees (tokens and the audit log are admin-only
// on the server too).
const adminViews: [string, string][] = [["tokens", "Tokens"], ["audit", "Audit"]];

function Nav({ at, me }: { at: string; me: Me }) {
  return html`<nav aria-label="Views"><span class="brand">agentic-sandbox</span>
    ${[...views, ...(isAdmin() ? adminViews : [])].map(([k, label]) => html`<a href=${"#/" + k} aria-current=${at === k ? "page" : undefined} data-testid=${"nav-" + k}>${label}</a>`)}
    <span class="whoami" data-testid="whoami" title=${me.expires_at ? `token expires ${new Date(me.expires_at).toLocaleString()}` : ""}>${me.name} <span class="pill role">${me.role}</span></span>
    <button class="link" onClick=${signOut}>Sign out</button></nav>`;
}

// ReadOnly says, where a write control would be, that this role only reads.
function ReadOnly({ what }: { what: string }) {
  return html`<p class="muted note" data-testid="read-only">Your role (${who.me?.role}) only reads: ${what}.</p>`;
}

function count<T>(xs: T[] | undefined, key: (x: T) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs || []) out[key(x)] = (out[key(x)] || 0) + 1;
  return out;
}

function Counts({ title, m, empty }: { title: string; m: Record<string, number>; empty?: unknown }) {
  const keys = Object.keys(m).sort();
  return html`<section class="card"><h2>${title}</h2>${keys.length === 0 ? html`<p class="muted">${empty || "none"}</p>` :
    html`<dl>${keys.map((k) => html`<dt>${k}</dt><dd>${m[k]}</dd>`)}</dl>`}</section>`;
}

function Overview() {
  const agents = useLive(["agents"], async () => (await call(api.GET("/api/v1/agents"))).data?.agents);
  const envs = useLive(["environments"], async () => (await call(api.GET("/api/v1/environments"))).data?.environments);
  const sessions = useLive(["sessions"], async () => (await call(api.GET("/api/v1/sessions"))).data?.sessions);
  const missions = useLive(["missions"], async () => (await call(api.GET("/api/v1/missions"))).data?.missions);
  const tasks = useLive(["tasks"], async () => (await call(api.GET("/api/v1/tasks", { params: { query: { limit: 200 } } }))).data?.tasks);
  const hitl = useLive(["hitl"], async () => (await call(api.GET("/api/v1/hitl"))).data?.requests);
  const aiwg = useLive([], async () => { const r = await call(api.GET("/api/v1/aiwg/status")); return r.data ?? (r.status ? { configured: false } as any : undefined); }, [], 5000);
  const [reErr, setReErr] = useState<any>();
  const reconnect = async () => { setReErr((await call(api.POST("/api/v1/aiwg/reconnect"))).error); };
  // Each empty card says what fills it.
  return html`<div class="grid">
    <${Counts} title="Agents by status" m=${count(agents, (a: S["Agent"]) => a.status)} empty=${agentsEmpty} />
    <${Counts} title="Environments by runtime" m=${count(envs, (e: S["Environment"]) => e.runtime)} empty=${canWrite() ? html`none: create one in <a href="#/environments">Environments</a>` : "none"} />
    <${Counts} title="Running sessions" m=${count((sessions || []).filter((s: S["Session"]) => s.state === "running"), (s: S["Session"]) => s.type)} empty=${canWrite() ? html`none: <a href="#/agents">Open terminal</a> on an agent starts a shell` : "none"} />
    <${Counts} title="Missions by state" m=${count(missions, (m: S["Mission"]) => m.state)} empty=${missionsEmpty(aiwg)} />
    <${Counts} title="Tasks by state" m=${count(tasks, (t: S["Task"]) => t.state)} empty=${canWrite() ? html`none: <a href="#/newtask">New task</a> submits one` : "none"} />
    <section class="card"><h2>Open HITL requests</h2><p class="big"><a href="#/hitl">${hitl ? hitl.length : "…"}</a></p></section>
    <section class="card" data-testid="aiwg-card"><h2>AIWG link</h2><${AIWGStatus} s=${aiwg} />
      ${aiwg?.configured && canWrite() ? html`<button data-testid="aiwg-reconnect" onClick=${reconnect}>Reconnect</button><${Err} e=${reErr} />` : ""}</section>
  </div>`;
}

function AIWGStatus({ s }: { s?: any }) {
  if (!s) return html`<p>…</p>`;
  if (!s.configured) return html`<p data-testid="aiwg-state">not configured</p>
    <p class="muted note">Set <code>AIWG_SERVE_ENDPOINT</code> to the address of <code>aiwg serve</code> and restart agentic-mgmt: missions come from it.</p>`;
  return html`<p data-testid="aiwg-state"><span class=${"pill " + (s.connected ? "ready" : "failed")}>${s.connected ? "connected" : "disconnected"}</span></p>
    <p class="muted small">${s.endpoint}</p>${s.executor_register_error ? html`<p class="error">${s.executor_register_error}</p>` : ""}`;
}

const agentsEmpty = html`none: host agents start with the server when <code>AGENTIC_HOST_AGENTS</code> is set; each environment brings its own`;

// missionsEmpty says what fills the missions list: aiwg serve, once the
// integration is configured.
function missionsEmpty(aiwg?: { configured?: boolean; endpoint?: string }, none = "none") {
  if (aiwg?.configured) return html`${none} yet: missions arrive from <code>aiwg serve</code> (${aiwg.endpoint}) as it dispatches them`;
  return html`${none}: missions arrive from <code>aiwg serve</code> once <code>AIWG_SERVE_ENDPOINT</code> is set`;
}

function pct(used?: number, total?: number) {
  return used !== undefined && total ? `${Math.round((100 * used) / total)}%` : "-";
}

function Agents() {
  const agents = useLive(["agents", "agent_metrics"], async () => (await call(api.GET("/api/v1/agents"))).data?.agents);
  if (agents && agents.length === 0) return html`<section><h1>Agents</h1><p class="empty" data-testid="agents-empty">No agents: ${agentsEmpty}.</p></section>`;
  return html`<section><h1>Agents</h1><table><thead><tr><th>Agent</th><th>Status</th><th>Runtime</th><th>CPU</th><th>Memory</th><th>Disk</th><th>Load</th><th>Running</th><th>Heartbeat</th><th></th></tr></thead>
    <tbody>${(agents || []).map((a: S["Agent"]) => html`<tr data-testid=${"agent-row-" + a.id}>
      <td><a href=${"#/agent/" + encodeURIComponent(a.id)} data-testid=${"agent-link-" + a.id}>${a.id}</a></td><td><span class=${"pill " + a.status}>${a.status}</span></td><td>${a.runtime}</td>
      <td>${a.metrics?.cpu_percent !== undefined ? a.metrics.cpu_percent.toFixed(0) + "%" : "-"}</td>
      <td>${pct(a.metrics?.memory_used_bytes, a.metrics?.memory_total_bytes)}</td>
      <td>${pct(a.metrics?.disk_used_bytes, a.metrics?.disk_total_bytes)}</td>
      <td>${a.metrics?.load_avg_1?.toFixed(2) ?? "-"}</td><td>${a.running_commands}</td><td>${ago(a.last_heartbeat)}</td>
      <td>${canWrite() ? html`<button data-testid=${"open-terminal-" + a.id} disabled=${a.status !== "ready" && a.status !== "busy"} onClick=${() => go("terminal", "new", a.id)}>Open terminal</button>` : ""}</td>
    </tr>`)}</tbody></table></section>`;
}

// The shells this page opened (Open terminal): leaving one asks whether to
// keep it or end it. A page that joined a session it did not open leaves
// it running without asking.
const openedHere = new Set<string>();

function TerminalView({ agentId, sessionId }: { agentId?: string; sessionId?: string }) {
  const el = useRef<HTMLDivElement>(null);
  const t = useRef<LiveTerminal>();
  const [st, setSt] = useState<TermState>({ sessionId: sessionId || "", agentId: agentId || "", name: "", role: "", connected: false, ended: "", error: "" });
  useEffect(() => {
    let started = false;
    const lt = new LiveTerminal({ el: el.current!, agentId, sessionId, role: agentId ? "controller" : "observer", onState: (s) => {
      setSt(s);
      // Once, when the shell this page asked for has started.
      if (agentId && s.sessionId && !started) { started = true; openedHere.add(s.sessionId); }
      if (agentId && s.sessionId && location.hash.includes("/terminal/new/")) history.replaceState(null, "", "#/session/" + encodeURIComponent(s.sessionId));
    } });
    t.current = lt;
    lt.focus();
    return () => lt.dispose();
  }, [agentId, sessionId]);
  // The session as REST has it: its name and agent title the page.
  const sess = useLive(["sessions"], async () => st.sessionId ?
    (await call(api.GET("/api/v1/sessions/{session_id}", { params: { path: { session_id: st.sessionId } } }))).data : undefined, [st.sessionId]);
  const name = sess?.name || st.name;
  const agent = sess?.agent_id || st.agentId;
  const ended = st.ended || (sess && !["starting", "running"].includes(sess.state) ? sess.state : "");
  useEffect(() => {
    const was = document.title;
    if (name) document.title = `${name} on ${agent} · agentic-sandbox`;
    return () => { document.title = was; };
  }, [name, agent]);

  // Leaving a shell this page opened asks first.
  const [leaving, setLeaving] = useState<string | null>(null);
  const [leaveErr, setLeaveErr] = useState<any>();
  const mine = !!st.sessionId && openedHere.has(st.sessionId) && !ended;
  useEffect(() => {
    if (!mine) return;
    const own = "#/session/" + encodeURIComponent(st.sessionId);
    leaveGuard = (to) => {
      if (to === own) return false;
      history.replaceState(null, "", own); // the address stays where the page is until the operator chooses
      setLeaving(to || "#/overview");
      return true;
    };
    return () => { leaveGuard = null; };
  }, [mine, st.sessionId]);
  const leave = async (end: boolean) => {
    const to = leaving!;
    if (end) {
      const r = await call(api.DELETE("/api/v1/sessions/{session_id}", { params: { path: { session_id: st.sessionId } } }));
      if (r.error && r.status !== 404) { setLeaveErr(r.error); return; }
    }
    openedHere.delete(st.sessionId);
    leaveGuard = null;
    location.hash = to;
  };
  useEffect(() => {
    if (!leaving) return;
    const esc = (e: KeyboardEvent) => { if (e.key === "Escape") setLeaving(null); };
    addEventListener("keydown", esc, true);
    return () => removeEventListener("keydown", esc, true);
  }, [leaving]);

  return html`<section class="terminal-view"><h1 data-testid="terminal-title" title=${st.sessionId ? "session " + st.sessionId : ""}>${name ?
      html`<span>Terminal <strong>${name}</strong> on <strong>${agent}</strong></span>` : html`<span>Terminal${agent ? html` on <strong>${agent}</strong>` : ""}</span>`}</h1>
    <p class="status" data-testid="terminal-status">${st.connected ? "connected" : "reconnecting…"} · role: <strong data-testid="terminal-role">${st.role || "-"}</strong>
      ${ended ? html` · <strong>ended: ${ended}</strong>` : ""}
      ${st.role === "observer" && canWrite() ? html` <button data-testid="take-control" onClick=${() => t.current?.takeControl()}>Take control</button>` : ""}
      ${canWrite() ? html`<button data-testid="terminal-kill" onClick=${() => t.current?.kill()} disabled=${!st.sessionId || !!ended}>Kill</button>` : html`<span class="muted" data-testid="read-only">watching: your role (${who.me?.role}) only reads</span>`}</p>
    <${Err} e=${st.error} />
    <div class="term" data-testid="terminal" ref=${el}></div>
    ${leaving ? html`<div class="modal" role="dialog" aria-modal="true" aria-labelledby="leave-title" data-testid="leave-dialog">
      <div class="box"><h2 id="leave-title">Keep this shell running?</h2>
        <p>This page opened <strong>${name || "a shell"}</strong> on <strong>${agent}</strong>. Kept, it runs on, and Sessions
          attaches to it again. Ended, its processes are killed.</p>
        <${Err} e=${leaveErr} />
        <div class="actions"><button data-testid="leave-keep" autofocus onClick=${() => leave(false)}>Keep it running</button>
          <button class="danger" data-testid="leave-end" onClick=${() => leave(true)}>End the shell</button>
          <button data-testid="leave-stay" onClick=${() => setLeaving(null)}>Stay here</button></div></div></div>` : ""}</section>`;
}

function Sessions() {
  const sessions = useLive(["sessions"], async () => (await call(api.GET("/api/v1/sessions"))).data?.sessions);
  const kill = async (id: string) => { await call(api.DELETE("/api/v1/sessions/{session_id}", { params: { path: { session_id: id } } })); };
  const byAgent: Record<string, S["Session"][]> = {};
  for (const s of sessions || []) (byAgent[s.agent_id] ||= []).push(s);
  return html`<section><h1>Sessions</h1>${sessions && Object.keys(byAgent).length === 0 ? html`<p class="empty" data-testid="sessions-empty">${canWrite() ? html`No sessions: <a href="#/agents">Open terminal</a> on an agent starts a shell here, as do <code>agenticctl shell AGENT</code> and <code>agenticctl sessions create</code>; tasks and missions run theirs.` : "No sessions."}</p>` : ""}
    ${Object.keys(byAgent).sort().map((agent) => html`<h2>${agent}</h2><table><thead><tr><th>Name</th><th>Type</th><th>State</th><th>Command</th><th>Viewers</th><th>Started</th><th></th></tr></thead><tbody>
    ${byAgent[agent].map((s) => html`<tr data-testid=${"session-row-" + s.session_id}><td>${s.name}</td><td>${s.type}</td><td>${s.state}${s.exit_code !== undefined ? ` (${s.exit_code})` : ""}</td>
      <td><code>${[s.command, ...s.args].join(" ") || "(login shell)"}</code></td>
      <td>${(s.viewers || []).length === 0 ? html`<span class="muted">none</span>` : `${(s.viewers || []).filter((v) => v.role === "controller").length ? "1 controller" : "no controller"}, ${(s.viewers || []).filter((v) => v.role === "observer").length} observing`}</td>
      <td>${ago(s.started_at || s.created_at)}</td>
      <td>${s.type !== "headless" ? html`<a href=${"#/session/" + s.session_id}>Attach</a>` : html`<a href=${"#/activity/" + s.session_id}>Transcript</a>`}
        <a href=${"#/log/" + s.session_id}>Log</a>
        ${(s.state === "running" || s.state === "starting") && canWrite() ? html`<button data-testid=${"session-kill-" + s.session_id} onClick=${() => kill(s.session_id)}>Kill</button>` : ""}</td></tr>`)}</tbody></table>`)}</section>`;
}

function Activity({ id }: { id: string }) {
  const feed = useLive(["sessions"], async () => (await call(api.GET("/api/v1/sessions/{session_id}/activity", { params: { path: { session_id: id } } }))).data as any, [id]);
  const events: any[] = feed?.events || [];
  const sum = feed?.summary || {};
  return html`<section><h1>Transcript <code>${id}</code></h1>
    <p class="muted">${sum.turns ?? 0} turns · ${sum.tool_calls ?? 0} tool calls · $${Number(sum.cost_usd ?? 0).toFixed(4)}${feed?.dropped ? ` · ${feed.dropped} older events not kept` : ""}</p>
    <${Transcript} events=${events} /></section>`;
}

function Transcript({ events }: { events: any[] }) {
  return html`<ol class="transcript" data-testid="transcript">${events.map((e) => html`<li class=${"ev " + (e.kind || e.type)}>
    <span class="kind">${e.kind || e.type}</span>${e.tool_name ? html` <strong>${e.tool_name}</strong>` : ""}
    ${e.text ? html`<pre>${e.text}</pre>` : ""}${(e.tool_input ?? e.input) !== undefined ? html`<pre>${JSON.stringify(e.tool_input ?? e.input, null, 2)}</pre>` : ""}
    ${e.cost_usd ? html` <span class="muted">$${Number(e.cost_usd).toFixed(4)}</span>` : ""}</li>`)}</ol>`;
}

// A piece of a session's log as the Log view shows it: text, or a marker
// where bytes are missing (dropped by the log's bound, or not stored).
type LogPiece = { text: string } | { from: number; to: number; reason: string };

// readLog reads a session's log from `from` to its end, a gap at a time:
// every read stops at a hole, and its headers say what is missing and why.
async function readLog(id: string, from: number, stopped: () => boolean): Promise<{ pieces: LogPiece[]; lost: number }> {
  const pieces: LogPiece[] = [];
  const dec = new TextDecoder();
  let at = from, lost = 0;
  for (let i = 0; i < 64 && !stopped(); i++) {
    const r = await fetch(`/api/v1/sessions/${encodeURIComponent(id)}/output?from=${at}`, { credentials: "same-origin" });
    if (!r.ok) throw new Error((await r.json().catch(() => ({})))?.error || `HTTP ${r.status}`);
    const start = Number(r.headers.get("X-Output-Start")), end = Number(r.headers.get("X-Output-End"));
    lost = Number(r.headers.get("X-Output-Lost") || 0);
    if (r.headers.get("X-Output-Gap") === "true") pieces.push({ from: at, to: start, reason: r.headers.get("X-Output-Gap-Reason") || "dropped" });
    const b = new Uint8Array(await r.arrayBuffer());
    if (b.length > 0) pieces.push({ text: dec.decode(b, { stream: true }) });
    if (b.length === 0 || end <= at) break;
    at = end;
  }
  return { pieces, lost };
}

function Log({ id }: { id: string }) {
  const [from, setFrom] = useState(0);
  const [log, setLog] = useState<{ pieces: LogPiece[]; lost: number; error?: string }>({ pieces: [], lost: 0 });
  useEffect(() => {
    let stop = false;
    readLog(id, from, () => stop).then((l) => { if (!stop) setLog(l); })
      .catch((e) => { if (!stop) setLog({ pieces: [], lost: 0, error: e instanceof TypeError ? "(the server cannot be reached)" : String(e.message || e) }); });
    return () => { stop = true; };
  }, [id, from]);
  return html`<section><h1>Log <code>${id}</code></h1><label>From byte <input type="number" min="0" value=${from} onChange=${(e: any) => setFrom(Number(e.target.value) || 0)} /></label>
    ${log.lost > 0 ? html`<p class="error" data-testid="output-lost">${log.lost} bytes of this session's output could not be stored (the server's disk was full); each place is marked below.</p>` : ""}
    ${log.error ? html`<p class="error">${log.error}</p>` : ""}
    <pre class="log" data-testid="session-log">${log.pieces.map((p) => "text" in p ? p.text :
      html`<span class=${"gap " + p.reason} data-testid="output-gap">[${p.to - p.from} bytes ${p.reason === "not_stored" ? "not stored: the server's disk was full" : "dropped: older than the log keeps"} (offsets ${p.from}–${p.to})]</span>`)}</pre></section>`;
}

// What an environment's state lets an operator do (the others are shown
// disabled, saying why).
const envActions: Record<"start" | "stop" | "pause" | "resume" | "hibernate" | "wake" | "delete", { when: string[]; why: string }> = {
  start: { when: ["stopped", "failed"], why: "only a stopped or failed environment starts" },
  stop: { when: ["ready", "booting", "paused"], why: "only a running environment stops" },
  pause: { when: ["ready"], why: "only a ready environment pauses" },
  resume: { when: ["paused"], why: "only a paused environment resumes" },
  hibernate: { when: ["ready"], why: "only a ready environment hibernates" },
  wake: { when: ["hibernated"], why: "only a hibernated environment wakes" },
  delete: { when: ["provisioning", "booting", "ready", "stopped", "paused", "hibernated", "failed"], why: "being deleted" },
};

// ---- sleep and wake: hibernate (saved to disk, its memory and CPU freed)
// and wake (restored; answered once its agent is back).

type SleepOp = "hibernate" | "wake";
type Sleep = { op: SleepOp; since: number; took?: number; env?: S["Environment"]; err?: { error?: string; code?: string } };

// canSleep: the runtime keeps something across a hibernation (memory, or
// its files only); `none` cannot hibernate, and offers neither button.
const canSleep = (mode?: string) => !!mode && mode !== "none";

// What a hibernation keeps, as a person reads it.
const keeps: Record<string, string> = {
  memory: "memory and processes kept: what ran continues after the wake",
  filesystem: "files kept: its processes start again after the wake",
};

// dur shows a Go duration as a person writes it ("30m0s" → "30m").
function dur(d?: string): string {
  return (d || "").replace(/(\d)m0s$/, "$1m").replace(/(\d)h0m$/, "$1h");
}

// useSleep runs hibernate and wake (each answers once done: saved, or its
// agent back) and keeps, per environment, the one under way or its outcome.
function useSleep(): [Record<string, Sleep>, (name: string, op: SleepOp) => Promise<void>] {
  const [runs, setRuns] = useState<Record<string, Sleep>>({});
  const run = async (name: string, op: SleepOp) => {
    const since = Date.now();
    setRuns((m) => ({ ...m, [name]: { op, since } }));
    const p = { params: { path: { name } } };
    const r = op === "hibernate" ? await call(api.POST("/api/v1/environments/{name}/hibernate", p)) :
      await call(api.POST("/api/v1/environments/{name}/wake", p));
    setRuns((m) => ({ ...m, [name]: { op, since, took: Date.now() - since, env: r.data, err: r.error } }));
  };
  return [runs, run];
}

// Elapsed counts the seconds since `since`, once a second.
function Elapsed({ since }: { since: number }) {
  const [, tick] = useState(0);
  useEffect(() => { const t = window.setInterval(() => tick((n) => n + 1), 1000); return () => window.clearInterval(t); }, []);
  return html`${Math.max(0, Math.floor((Date.now() - since) / 1000))} s`;
}

// sleepError says what a refused or failed hibernate or wake means: a
// headline, then the server's own words.
function sleepError(op: SleepOp, e: { error?: string; code?: string }): string {
  switch (e.code) {
    case "wake_failed": return "Wake failed: its saved state could not be used.";
    case "hibernate_limit": return "Not hibernated: the saved states of hibernated environments are at their limit (AGENTIC_HIBERNATE_MAX_BYTES); wake or delete a hibernated environment first.";
    case "invalid_state": return `Not possible in its state: only a ready environment hibernates, only a hibernated one wakes.`;
    case "not_supported": return "Its runtime cannot hibernate.";
    default: return `${op === "hibernate" ? "Hibernate" : "Wake"} failed.`;
  }
}

// SleepOutcome shows a hibernate or wake under way (with its seconds), or
// what it came to.
function SleepOutcome({ name, s, shown }: { name: string; s?: Sleep; shown?: string }) {
  if (!s) return null;
  if (s.took === undefined) return html`<div class="progress" role="status" data-testid=${"env-sleep-progress-" + name}>${s.op === "hibernate" ?
    "hibernating: saving it to disk…" : "waking: restoring it and waiting for its agent…"} <${Elapsed} since=${s.since} /></div>`;
  if (s.err) return html`<div class="error sleep-error" role="alert" data-testid=${"env-sleep-error-" + name}><strong>${sleepError(s.op, s.err)}</strong>
    ${s.err.code ? html` <code>${s.err.code}</code>` : ""}${shown && s.err.error?.includes(shown) ? "" : html`<div class="detail">${s.err.error || ""}</div>`}</div>`;
  const e = s.env;
  return html`<div class="ok sleep-done" role="status" data-testid=${"env-sleep-done-" + name}>${s.op === "hibernate" ?
    `Hibernated in ${ms(s.took)}${e?.state === "hibernated" ? `: ${bytes(e.saved_bytes ?? 0)} saved` : ""}.` :
    e?.state === "ready" ? `Awake in ${ms(s.took)}: its agent is back.` : `Wake answered in ${ms(s.took)}: ${e?.state || "done"}.`}</div>`;
}

// Asleep says of a hibernated environment its saved size, since when and
// why it sleeps.
function Asleep({ e }: { e: S["Environment"] }) {
  if (e.state !== "hibernated") return null;
  return html`<div class="sleep" data-testid=${"env-asleep-" + e.name}>
    <span title=${e.hibernate ? keeps[e.hibernate] || e.hibernate : ""}><strong data-testid=${"env-saved-" + e.name}>${bytes(e.saved_bytes ?? 0)}</strong> saved${e.hibernate ? ` (${e.hibernate})` : ""}</span>${" · "}
    asleep <span title=${e.hibernated_at ? new Date(e.hibernated_at).toLocaleString() : ""}>${ago(e.hibernated_at)}</span>
    ${e.sleep_reason ? html`${" · "}<span data-testid=${"env-sleep-reason-" + e.name}>${e.sleep_reason.replace(/(\S+)$/, (d) => dur(d))}</span>` : ""}</div>`;
}

// Activity says when something last used the environment, and its idle
// policy when it has one.
function EnvActivity({ e, label }: { e: S["Environment"]; label?: string }) {
  return html`<div data-testid=${"env-activity-" + e.name}>${label ? html`<span class="muted">${label} </span>` : ""}${e.last_activity_at ?
      html`<span title=${new Date(e.last_activity_at).toLocaleString()}>${ago(e.last_activity_at)}</span>${e.last_activity_kind ? html` <span class="act-kind">${e.last_activity_kind}</span>` : ""}` :
      html`<span class="muted" title="nothing has used it yet">-</span>`}
    ${e.idle_after ? html`<div class="policy" data-testid=${"env-idle-after-" + e.name}>sleeps after ${dur(e.idle_after)} idle</div>` : ""}
    ${e.delete_after ? html`<div class="policy" data-testid=${"env-delete-after-" + e.name}>deleted ${dur(e.delete_after)} after it sleeps or stops</div>` : ""}</div>`;
}

// The states in which an environment's steps are still under way: shown
// open; once done they fold into one line.
const envBusy = ["provisioning", "booting", "hibernating", "waking", "deleting"];

function until(t?: string): string {
  if (!t) return "-";
  const s = Math.round((new Date(t).getTime() - Date.now()) / 1000);
  if (s <= 0) return "due now";
  if (s < 90) return `in ${s}s`;
  if (s < 3600) return `in ${Math.round(s / 60)}m`;
  return `in ${Math.floor(s / 3600)}h ${Math.round((s % 3600) / 60)}m`;
}

// when is a time to come, local and from now.
function when(t?: string) {
  if (!t) return "-";
  return html`<time datetime=${t}>${new Date(t).toLocaleString()}</time> (${until(t)})`;
}

function ms(n?: number): string {
  if (n === undefined) return "";
  return n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(1)} s`;
}

function Environments() {
  const envs = useLive(["environments"], async () => (await call(api.GET("/api/v1/environments"))).data?.environments);
  const runtimes = useLive([], async () => (await call(api.GET("/api/v1/runtimes"))).data?.runtimes, [], 10000);
  // The tasks that have an environment: each links from its environment's row.
  const tasks = useLive(["tasks"], async () => (await call(api.GET("/api/v1/tasks", { params: { query: { state: "provisioning,ready,running,completing,failed_preserved", limit: 500 } } }))).data?.tasks, [], 15000);
  const taskOf: Record<string, S["Task"]> = {};
  for (const t of tasks || []) taskOf[t.environment.name] = t;
  const [form, setForm] = useState<Record<string, string>>({ runtime: "", name: "", image: "", profile: "", cpus: "", memory_mb: "", network: "", allowed: "", isolation: "", idle_after: "", delete_after: "" });
  // Functional updates: a poll's answer must not undo keys typed meanwhile.
  useEffect(() => { if (runtimes?.length) setForm((f) => (f.runtime ? f : { ...f, runtime: runtimes[0].runtime })); }, [runtimes]);
  const [err, setErr] = useState<any>();
  const set = (k: string) => (e: any) => { const v = e.target.value; setForm((f) => ({ ...f, [k]: v })); };
  // Only what the chosen runtime takes and this server allows is offered.
  const rt = (runtimes || []).find((r: S["Runtime"]) => r.runtime === form.runtime);
  const defaultNet = rt?.network_modes[0];
  const nets = (rt?.allowed_network_modes || []).filter((m: string) => m !== defaultNet);
  const limits = rt?.limits || [];
  const create = async (ev: Event) => {
    ev.preventDefault();
    const body: any = { runtime: form.runtime || runtimes?.[0]?.runtime, name: form.name };
    if (form.image && rt?.images) body.image = form.image;
    if (form.profile) body.profile = form.profile;
    if (form.isolation && (rt?.tiers || []).includes(form.isolation)) body.isolation = form.isolation;
    if (form.network && nets.includes(form.network)) body.network = form.network;
    if (body.network === "proxy") body.allowed_hosts = form.allowed.split(",").map((h) => h.trim()).filter((h) => h);
    const res: Record<string, number> = {};
    if (form.cpus && limits.includes("cpus")) res.cpus = Number(form.cpus);
    if (form.memory_mb && limits.includes("memory_mb")) res.memory_mb = Number(form.memory_mb);
    if (Object.keys(res).length) body.resources = res;
    // The idle policy (Go durations, checked by the server): idle_after only
    // where the runtime can hibernate; delete_after on any.
    if (form.idle_after.trim() && canSleep(rt?.hibernate)) body.idle_after = form.idle_after.trim();
    if (form.delete_after.trim()) body.delete_after = form.delete_after.trim();
    const r = await call(api.POST("/api/v1/environments", { body }));
    setErr(r.error);
    if (!r.error) setForm((f) => ({ ...f, name: "" }));
  };
  const [sleeps, sleep] = useSleep();
  const act = async (name: string, what: keyof typeof envActions) => {
    if (what === "hibernate" || what === "wake") return sleep(name, what);
    const p = { params: { path: { name } } };
    const r = what === "delete" ? await call(api.DELETE("/api/v1/environments/{name}", p)) :
      what === "start" ? await call(api.POST("/api/v1/environments/{name}/start", p)) :
      what === "stop" ? await call(api.POST("/api/v1/environments/{name}/stop", p)) :
      what === "pause" ? await call(api.POST("/api/v1/environments/{name}/pause", p)) : await call(api.POST("/api/v1/environments/{name}/resume", p));
    setErr(r.error);
  };
  const button = (e: S["Environment"], what: keyof typeof envActions, label: string, title = "") => {
    // One hibernate or wake at a time from this page.
    const busy = sleeps[e.name] && sleeps[e.name].took === undefined;
    const ok = envActions[what].when.includes(e.state) && !busy;
    return html`<button data-testid=${`env-${what}-${e.name}`} disabled=${!ok} title=${ok ? title : busy ? `${sleeps[e.name].op} under way` : `${e.state}: ${envActions[what].why}`} onClick=${() => act(e.name, what)}>${label}</button>`;
  };
  const pausable = (name: string) => !!(runtimes || []).find((r: S["Runtime"]) => r.runtime === name)?.pause;
  // What a hibernation keeps: the environment's own word, else its runtime's.
  const sleepMode = (e: S["Environment"]) => e.hibernate || (runtimes || []).find((r: S["Runtime"]) => r.runtime === e.runtime)?.hibernate;
  return html`<section><h1>Environments</h1>
    ${!canWrite() ? html`<${ReadOnly} what="no environments are created, started, stopped or deleted from here" />` : html`<form class="inline" onSubmit=${create} aria-label="Create an environment">
      <label>Runtime <select value=${form.runtime} onChange=${(e: any) => { const v = e.target.value; setForm((f) => ({ ...f, runtime: v, network: "", profile: "", isolation: "" })); }} data-testid="env-runtime">${(runtimes || []).map((r: any) => html`<option value=${r.runtime}>${r.runtime}</option>`)}</select></label>
      <label>Name <input required value=${form.name} onInput=${set("name")} data-testid="env-name" /></label>
      ${rt?.images ? html`<label>Image <input value=${form.image} onInput=${set("image")} placeholder="the runtime's own" /></label>` : ""}
      ${rt?.tiers?.length ? html`<label>Isolation <select value=${form.isolation} onChange=${set("isolation")} data-testid="env-isolation"><option value="">standard (${rt.isolation})</option>${rt.tiers.map((t: string) => html`<option value=${t}>${t}</option>`)}</select></label>` : ""}
      ${rt?.profiles.length ? html`<label>Profile <select value=${form.profile} onChange=${set("profile")}><option value="">default</option>${rt.profiles.map((p: string) => html`<option value=${p}>${p}</option>`)}</select></label>` : ""}
      ${limits.includes("cpus") ? html`<label>CPUs <input type="number" min="0" step="0.5" value=${form.cpus} onInput=${set("cpus")} /></label>` : ""}
      ${limits.includes("memory_mb") ? html`<label>Memory MiB <input type="number" min="0" value=${form.memory_mb} onInput=${set("memory_mb")} /></label>` : ""}
      <label>Network <select value=${form.network} onChange=${set("network")} data-testid="env-network">
        <option value="">${defaultNet ? `default (${defaultNet})` : "default"}</option>${nets.map((m: string) => html`<option value=${m}>${m}</option>`)}</select></label>
      ${rt && rt.isolation !== "host" && rt.network_modes.some((m: string) => m !== defaultNet && !rt.allowed_network_modes.includes(m)) ?
        html`<span class="muted note" data-testid="env-network-note">${rt.network_modes.filter((m: string) => m !== defaultNet && !rt.allowed_network_modes.includes(m)).join(", ")}: not allowed on this server (<code>AGENTIC_ALLOWED_NETWORKS</code>)</span>` : ""}
      ${form.network === "proxy" ? html`<label>Allowed hosts <input value=${form.allowed} onInput=${set("allowed")} placeholder="api.anthropic.com, *.npmjs.org" data-testid="env-allowed-hosts" /></label>` : ""}
      ${canSleep(rt?.hibernate) ? html`<label title=${`Hibernate it once nothing has used it for this long (${keeps[rt!.hibernate] || rt!.hibernate}); empty: never`}>Idle after
        <input size="7" value=${form.idle_after} onInput=${set("idle_after")} placeholder="e.g. 30m" data-testid="env-idle-after" /></label>` : ""}
      <label title="Delete it once it has been hibernated or stopped for this long; empty: never">Delete after
        <input size="7" value=${form.delete_after} onInput=${set("delete_after")} placeholder="e.g. 24h" data-testid="env-delete-after" /></label>
      <button type="submit" data-testid="env-create">Create</button></form>`}
    <${Err} e=${err} />
    ${envs && envs.length === 0 ? html`<p class="empty" data-testid="envs-empty">${canWrite() ? html`No environments: create one above (or <code>agenticctl env create</code>); a task makes its own.` : "No environments."}</p>` : ""}
    <table hidden=${!envs || envs.length === 0}><thead><tr><th>Name</th><th>Runtime</th><th>State</th><th>Agent</th><th>Last activity</th><th>Steps</th><th></th></tr></thead><tbody>
    ${(envs || []).map((e: S["Environment"]) => {
      const task = taskOf[e.name];
      const last = e.events[e.events.length - 1];
      const steps = html`<ol class="steps">${e.events.map((s) => html`<li>${s.step}${s.message ? ": " + s.message : ""}</li>`)}</ol>`;
      return html`<tr data-testid=${"env-row-" + e.name}><td><a href=${"#/environment/" + encodeURIComponent(e.name)} data-testid=${"env-link-" + e.name}>${e.name}</a>
        ${task ? html`<div class="note" data-testid=${"env-task-" + e.name}>task <a href=${"#/task/" + encodeURIComponent(task.id)}>${task.name}</a>
          ${task.state === "failed_preserved" ? html`<div class="preserved" data-testid=${"env-preserved-" + e.name}>failed, kept for inspection until ${when(task.preserve_until)}, then destroyed</div>` :
            html` <span class="muted">(${task.state})</span>`}</div>` : ""}</td><td>${e.runtime}${e.isolation ? html` <span class="muted" data-testid=${"env-isolation-" + e.name} title="isolation tier">${e.isolation}</span>` : ""}</td>
      <td><span class=${"pill " + e.state} data-testid=${"env-state-" + e.name}>${e.state}</span>${e.error ? html`<div class="error">${e.error}</div>` : ""}
        <${Asleep} e=${e} /><${SleepOutcome} name=${e.name} s=${sleeps[e.name]} shown=${e.error} /></td><td>${e.agent_status || "-"}</td>
      <td><${EnvActivity} e=${e} /></td>
      <td>${envBusy.includes(e.state) ? steps :
        html`<details data-testid=${"env-steps-" + e.name}><summary>${e.events.length} steps${last ? `, last ${last.step}` : ""}${e.provision_ms !== undefined ? ` · provisioned in ${ms(e.provision_ms)}` : ""}</summary>${steps}</details>`}
        ${e.allowed_hosts ? html`<p class="muted small">egress to ${e.allowed_hosts.join(", ")}</p>` : ""}
        ${(e.egress || []).slice(-5).map((g) => html`<div class=${"small " + (g.allowed ? "ok" : "error")}>${g.allowed ? "→" : "✕"} ${g.host}:${g.port} ${g.allowed ? bytes(g.bytes_down) : g.reason || ""}</div>`)}</td>
      <td class="actions">${canWrite() ? html`${button(e, "start", "Start")}${button(e, "stop", "Stop")}
        ${pausable(e.runtime) ? html`${button(e, "pause", "Pause")}${button(e, "resume", "Resume")}` : ""}
        ${canSleep(sleepMode(e)) ? html`${button(e, "hibernate", "Hibernate", `Save it to disk and free its memory and CPU (${keeps[sleepMode(e)!] || sleepMode(e)})`)}${button(e, "wake", "Wake")}` : ""}
        ${button(e, "delete", "Delete")}` : ""}</td></tr>`;
    })}</tbody></table>
    <${Pools} runtimes=${runtimes} /></section>`;
}

// Pools kept ready for environment creates of their spec (the runtime's
// default spec from here; PUT /api/v1/pools takes any).
// ---- ports: what listens inside an environment (or on an agent's machine)

// A listening port as REST lists it. public, public_until and preview_url
// came with previews (issue 29): optional here, so an older server's list
// still shows.
type Port = S["ListeningPort"] & { public?: boolean; public_until?: string; preview_url?: string };
type PortList = { ports: Port[]; truncated: boolean; updated_at?: string };

// One row per port: its IPv4 and IPv6 sockets (and their processes) together,
// as "Open" and "Make public" are the port's.
type PortRow = { port: number; addresses: string[]; processes: string[]; public: boolean; until?: string; url?: string };

// A public mark counts until it expires, even before the next list says so.
function isPublic(p: Port, now: number): boolean {
  return !!p.public && (!p.public_until || new Date(p.public_until).getTime() > now);
}

function byPort(ports: Port[], now: number): PortRow[] {
  const rows = new Map<number, PortRow>();
  for (const p of ports) {
    let r = rows.get(p.port);
    if (!r) rows.set(p.port, (r = { port: p.port, addresses: [], processes: [], public: false }));
    const a = p.family === "ipv6" ? `[${p.address}]` : p.address;
    if (!r.addresses.includes(a)) r.addresses.push(a);
    if (p.process && !r.processes.includes(p.process)) r.processes.push(p.process);
    if (isPublic(p, now)) { r.public = true; r.until = p.public_until; }
    r.url ||= p.preview_url;
  }
  return [...rows.values()].sort((a, b) => a.port - b.port);
}

// The longest a timer may wait (setTimeout's delay is a signed 32-bit count).
const maxTimer = 24 * 3600 * 1000;

// Ports lists the ports of an environment (env: with "Make public" /
// "Make private") or of a plain agent (agent: read-only), reloaded when the
// change stream names `ports`; the stream's (re)connection reloads it too,
// so the safety-net reload is rare.
function Ports({ env, agent }: { env?: string; agent?: string }) {
  const [list, setList] = useState<PortList | undefined>();
  const [err, setErr] = useState<any>();
  // A toggle's error stays until the next toggle (reloads do not clear it).
  const [actErr, setActErr] = useState<string>();
  const [busy, setBusy] = useState<number | null>(null);
  const [now, setNow] = useState(Date.now());
  const load = useRef<() => Promise<void>>(async () => {});
  useEffect(() => {
    let gone = false, seq = 0;
    const f = async () => {
      const mine = ++seq;
      const r = env ? await call(api.GET("/api/v1/environments/{name}/ports", { params: { path: { name: env } } })) :
        await call(api.GET("/api/v1/agents/{agent_id}/ports", { params: { path: { agent_id: agent || "" } } }));
      // An answer overtaken by a later request's is dropped.
      if (gone || mine !== seq) return;
      setNow(Date.now());
      if (r.data) { setList(r.data as PortList); setErr(undefined); } else if (r.status) setErr(r.error);
    };
    load.current = f;
    const stop = live(["ports"], f, 10 * 60 * 1000);
    return () => { gone = true; stop(); };
  }, [env, agent]);
  // The next public mark to expire turns private on time, without a reload.
  useEffect(() => {
    const next = Math.min(...(list?.ports || []).filter((p) => isPublic(p, now) && p.public_until).map((p) => new Date(p.public_until!).getTime()));
    if (!isFinite(next)) return;
    const t = window.setTimeout(() => { setNow(Date.now()); load.current(); }, Math.min(Math.max(next - Date.now(), 0) + 100, maxTimer));
    return () => window.clearTimeout(t);
  }, [list, now]);

  const setPublic = async (port: number, on: boolean) => {
    if (!env) return;
    setBusy(port);
    const path = `/api/v1/environments/${encodeURIComponent(env)}/ports/${port}/public`;
    const r = await call(request(on ? "PUT" : "DELETE", path, on ? { ttl_seconds: 3600 } : undefined));
    setBusy(null);
    if (r.error) { setActErr(`${on ? "Make public" : "Make private"} ${port}: ${r.error.error || "failed"}`); return; }
    setActErr(undefined);
    // Shown at once from the answer; the list then reloads.
    setList((l) => l && { ...l, ports: l.ports.map((p) => p.port !== port ? p : { ...p, public: on, public_until: on ? r.data?.public_until : undefined }) });
    setNow(Date.now());
    await load.current();
  };

  const rows = byPort(list?.ports || [], now);
  return html`<section data-testid="ports"><h2>Ports</h2><${Err} e=${err} /><${Err} e=${actErr} />
    ${!list ? html`<p class="muted">…</p>` : rows.length === 0 ? html`<p class="empty" data-testid="ports-empty">${list.updated_at ?
      `Nothing listens yet — start a server ${env ? "inside" : "on it"}, e.g. on 127.0.0.1:5173` :
      "No ports reported yet: its agent reports them once it is connected."}</p>` :
    html`<table><thead><tr><th>Port</th><th>Address</th><th>Process</th><th>Visibility</th><th></th></tr></thead><tbody>
      ${rows.map((p) => html`<tr data-testid=${"port-row-" + p.port}><td><strong>${p.port}</strong></td>
        <td>${p.addresses.map((a) => html`<code class="addr">${a}</code> `)}</td><td>${p.processes.join(", ") || html`<span class="muted">-</span>`}</td>
        <td data-testid=${"port-visibility-" + p.port}>${p.public ? html`<span class="pill public">public</span> <span class="small">until ${when(p.until)}</span>` :
          html`<span class="pill">private</span>`}</td>
        <td class="actions">${p.url ? html`<a class="button" href=${p.url} target="_blank" rel="noopener" data-testid=${"port-open-" + p.port}>Open</a>` : ""}
          ${env && canWrite() ? p.public ?
            html`<button data-testid=${"port-private-" + p.port} disabled=${busy === p.port} onClick=${() => setPublic(p.port, false)}>Make private</button>` :
            html`<button data-testid=${"port-public-" + p.port} disabled=${busy === p.port} title="Anyone with the link may open it for an hour, without signing in" onClick=${() => setPublic(p.port, true)}>Make public</button>` : ""}</td></tr>`)}
    </tbody></table>`}
    ${list?.truncated ? html`<p class="muted note">More ports listen than the 256 listed (the lowest are).</p>` : ""}
    ${!env && rows.length ? html`<p class="muted note">Ports of an environment are made public on its page (Environments).</p>` : ""}
  </section>`;
}

// What requests through injected secrets used (Task.usage, Environment.usage).
function InjectedUsage({ usage: u, testid }: { usage: S["InjectedUsage"]; testid: string }) {
  return html`<p data-testid=${testid}>Injected secrets: <strong>${u.requests}</strong> requests (${bytes(u.bytes_sent)} sent, ${bytes(u.bytes_received)} received) · ${u.input_tokens} input, ${u.output_tokens} output tokens${
    u.cache_creation_input_tokens || u.cache_read_input_tokens ? ` (cache: ${u.cache_creation_input_tokens} written, ${u.cache_read_input_tokens} read)` : ""} · cost <strong>$${u.cost_usd.toFixed(4)}</strong></p>`;
}

// An environment's page: its state, its injected secrets' usage, a terminal
// on its agent and its ports.
function EnvironmentPage({ name }: { name: string }) {
  const [missing, setMissing] = useState(false);
  const [sleeps, sleep] = useSleep();
  const env = useLive(["environments"], async () => {
    const r = await call(api.GET("/api/v1/environments/{name}", { params: { path: { name } } }));
    setMissing(r.status === 404);
    return r.data;
  }, [name]);
  if (missing) return html`<section><h1>Environment <code>${name}</code></h1><p class="empty" data-testid="env-missing">No environment named <code>${name}</code>: see <a href="#/environments">Environments</a>.</p></section>`;
  if (!env) return html`<p>Loading…</p>`;
  const up = env.agent_status === "ready" || env.agent_status === "busy";
  const run = sleeps[name], busy = !!run && run.took === undefined;
  const sleepButton = (op: SleepOp, label: string) => {
    const ok = envActions[op].when.includes(env.state) && !busy;
    return html`<button data-testid=${`env-${op}`} disabled=${!ok} title=${ok ? "" : busy ? `${run.op} under way` : `${env.state}: ${envActions[op].why}`} onClick=${() => sleep(name, op)}>${label}</button>`;
  };
  return html`<section><h1><span>Environment <strong data-testid="env-title">${env.name}</strong></span><span class=${"pill " + env.state} data-testid="env-state">${env.state}</span>
      ${canWrite() ? html`<button data-testid="env-open-terminal" disabled=${!up} title=${up ? "" : "its agent is not connected"} onClick=${() => go("terminal", "new", env.agent_id)}>Open terminal</button>
        ${canSleep(env.hibernate) ? html`${sleepButton("hibernate", "Hibernate")}${sleepButton("wake", "Wake")}` : ""}` : ""}</h1>
    <p class="muted"><a href="#/environments">Environments</a> · runtime ${env.runtime}${env.isolation ? ` (${env.isolation})` : ""} · agent <code>${env.agent_id}</code> ${env.agent_status || "-"}
      ${env.network ? ` · network ${env.network}` : ""}${env.ready_at ? html` · ready ${ago(env.ready_at)}` : ""}</p>
    ${env.error ? html`<p class="error">${env.error}</p>` : ""}
    <${Asleep} e=${env} /><${SleepOutcome} name=${name} s=${run} shown=${env.error} />
    <${EnvActivity} e=${env} label="Last activity:" />
    ${env.secrets?.length ? html`<p class="muted" data-testid="env-secrets">Secrets injected by the server: ${env.secrets.map((x, i) => html`${i ? ", " : ""}<code>${x.name}</code> → ${x.host}`)}</p>` : ""}
    ${env.usage ? html`<${InjectedUsage} usage=${env.usage} testid="env-usage" />` : ""}
    <${Ports} key=${"env-" + name} env=${name} /></section>`;
}

// A plain agent's page: its ports (public marks are an environment's).
function AgentPage({ id }: { id: string }) {
  const [missing, setMissing] = useState(false);
  const agent = useLive(["agents"], async () => {
    const r = await call(api.GET("/api/v1/agents/{agent_id}", { params: { path: { agent_id: id } } }));
    setMissing(r.status === 404);
    return r.data;
  }, [id]);
  if (missing) return html`<section><h1>Agent <code>${id}</code></h1><p class="empty">No agent <code>${id}</code>: see <a href="#/agents">Agents</a>.</p></section>`;
  return html`<section><h1><span>Agent <strong>${id}</strong></span>${agent ? html`<span class=${"pill " + agent.status}>${agent.status}</span>` : ""}
      ${canWrite() ? html`<button data-testid=${"open-terminal-" + id} disabled=${!agent || (agent.status !== "ready" && agent.status !== "busy")} onClick=${() => go("terminal", "new", id)}>Open terminal</button>` : ""}</h1>
    <p class="muted"><a href="#/agents">Agents</a>${agent ? ` · ${agent.runtime} · ${agent.hostname || ""}` : ""}</p>
    <${Ports} key=${"agent-" + id} agent=${id} /></section>`;
}

function Pools({ runtimes }: { runtimes: any[] | undefined }) {
  const pools = useLive(["environments"], async () => (await call(api.GET("/api/v1/pools"))).data?.pools);
  const blank = { name: "", runtime: "", size: "1", idle_after: "", delete_after: "" };
  const [form, setForm] = useState<Record<string, string>>(blank);
  // The pool being edited: its spec goes back as it is (this form sets the
  // runtime's default spec for a new one).
  const [editing, setEditing] = useState<S["Pool"] | undefined>();
  useEffect(() => { if (runtimes?.length) setForm((f) => (f.runtime ? f : { ...f, runtime: runtimes[0].runtime })); }, [runtimes]);
  const [err, setErr] = useState<any>();
  const set = (k: string) => (e: any) => { const v = e.target.value; setForm((f) => ({ ...f, [k]: v })); };
  const rt = (runtimes || []).find((r: S["Runtime"]) => r.runtime === (form.runtime || runtimes?.[0]?.runtime));
  const put = async (ev: Event) => {
    ev.preventDefault();
    const body: S["PoolRequest"] = { runtime: form.runtime || runtimes?.[0]?.runtime, size: Number(form.size) };
    if (editing && editing.name === form.name && editing.runtime === body.runtime) body.spec = editing.spec;
    // The idle policy of the environments taken from it (Go durations,
    // checked by the server, whose refusal is shown as it says it).
    if (form.idle_after.trim() && canSleep(rt?.hibernate)) body.idle_after = form.idle_after.trim();
    if (form.delete_after.trim()) body.delete_after = form.delete_after.trim();
    const r = await call(api.PUT("/api/v1/pools/{name}", { params: { path: { name: form.name } }, body }));
    setErr(r.error);
    if (!r.error) { setForm((f) => ({ ...blank, runtime: f.runtime })); setEditing(undefined); }
  };
  const edit = (p: S["Pool"]) => {
    setEditing(p);
    setErr(undefined);
    setForm({ name: p.name, runtime: p.runtime, size: String(p.size), idle_after: dur(p.idle_after), delete_after: dur(p.delete_after) });
  };
  const remove = async (name: string) => setErr((await call(api.DELETE("/api/v1/pools/{name}", { params: { path: { name } } }))).error);
  return html`<h2>Warm pools</h2>
    <p class="muted small">A create whose runtime and spec match a pool takes a member, ready at once under its own name.</p>
    ${canWrite() ? html`<form class="inline" onSubmit=${put} aria-label="Define a warm pool">
      <label>Name <input required value=${form.name} onInput=${set("name")} data-testid="pool-name" /></label>
      <label>Runtime <select value=${form.runtime} onChange=${set("runtime")} data-testid="pool-runtime">${(runtimes || []).map((r: any) => html`<option value=${r.runtime}>${r.runtime}</option>`)}</select></label>
      <label>Size <input type="number" min="0" max="64" value=${form.size} onInput=${set("size")} data-testid="pool-size" /></label>
      ${canSleep(rt?.hibernate) ? html`<label title=${`Hibernate an environment taken from it once nothing has used it for this long (${keeps[rt!.hibernate] || rt!.hibernate}); empty: 30m`}>Idle after
        <input size="7" value=${form.idle_after} onInput=${set("idle_after")} placeholder="30m" data-testid="pool-idle-after" /></label>` : ""}
      <label title="Delete an environment taken from it once it has been hibernated or stopped for this long; empty: never">Delete after
        <input size="7" value=${form.delete_after} onInput=${set("delete_after")} placeholder="e.g. 24h" data-testid="pool-delete-after" /></label>
      <button type="submit" data-testid="pool-put">${editing && editing.name === form.name ? "Save" : "Keep ready"}</button></form>` : ""}
    <${Err} e=${err} />
    ${pools && pools.length === 0 ? html`<p class="muted">No pools: every create provisions.</p>` : ""}
    <table hidden=${!pools || pools.length === 0}><thead><tr><th>Pool</th><th>Runtime</th><th>Size</th><th>Idle</th><th>Warming</th><th>Hits</th><th>Misses</th><th>Taken ones</th><th>Members</th><th></th></tr></thead><tbody>
    ${(pools || []).map((p: S["Pool"]) => html`<tr data-testid=${"pool-row-" + p.name}><td>${p.name}</td><td>${p.runtime}${p.spec.isolation ? html` <span class="muted" title="isolation tier">${p.spec.isolation}</span>` : ""}</td><td>${p.size}</td>
      <td>${p.idle}</td><td>${p.warming}</td><td>${p.hits}</td><td>${p.misses}</td>
      <td><${PoolPolicy} p=${p} hibernate=${(runtimes || []).find((r: S["Runtime"]) => r.runtime === p.runtime)?.hibernate} /></td>
      <td>${p.members.map((m) => html`<div class="small"><code>${m.name}</code> <span class=${"pill " + m.state}>${m.state}</span></div>`)}</td>
      <td class="actions">${canWrite() ? html`<button data-testid=${"pool-edit-" + p.name} onClick=${() => edit(p)}>Edit</button><button data-testid=${"pool-delete-" + p.name} onClick=${() => remove(p.name)}>Delete</button>` : ""}</td></tr>`)}</tbody></table>`;
}

// PoolPolicy is the idle policy of the environments taken from a pool: as
// defined, or the server's default (30m where the runtime can hibernate).
function PoolPolicy({ p, hibernate }: { p: S["Pool"]; hibernate?: string }) {
  const idle = p.idle_after ? html`<div class="policy" data-testid=${"pool-idle-after-" + p.name}>sleep after ${dur(p.idle_after)} idle</div>` :
    canSleep(hibernate) ? html`<div class="policy muted" data-testid=${"pool-idle-after-" + p.name} title="the default of a pool naming none">sleep after 30m idle</div>` : "";
  return html`${idle}${p.delete_after ? html`<div class="policy" data-testid=${"pool-delete-after-" + p.name}>deleted ${dur(p.delete_after)} after they sleep or stop</div>` : ""}
    ${!idle && !p.delete_after ? html`<span class="muted">-</span>` : ""}`;
}

function Missions() {
  const missions = useLive(["missions"], async () => (await call(api.GET("/api/v1/missions"))).data?.missions);
  const aiwg = useLive([], async () => { const r = await call(api.GET("/api/v1/aiwg/status")); return r.data ?? (r.status ? { configured: false } as any : undefined); }, [], 10000);
  if (missions && missions.length === 0) return html`<section><h1>Missions</h1><p class="empty" data-testid="missions-empty">${missionsEmpty(aiwg, "No missions")}.</p></section>`;
  return html`<section><h1>Missions</h1><table><thead><tr><th>Mission</th><th>State</th><th>Agent</th><th>Objective</th><th>Timeline</th></tr></thead><tbody>
    ${(missions || []).map((m: S["Mission"]) => html`<tr data-testid=${"mission-row-" + m.mission_id}><td>${m.mission_id}</td><td><span class=${"pill " + m.state}>${m.state}</span></td>
      <td>${m.agent_id || "-"}</td><td><code>${m.objective}</code></td>
      <td><ol class="steps" data-testid=${"mission-timeline-" + m.mission_id}>${(m.timeline || []).map((e) => html`<li><strong>${e.event.replace(/^mission\./, "")}</strong> <span class="muted">${new Date(e.at).toLocaleTimeString()}</span>${e.note ? html` ${e.note}` : ""}</li>`)}</ol></td></tr>`)}</tbody></table></section>`;
}

function HITL() {
  const reqs = useLive(["hitl"], async () => (await call(api.GET("/api/v1/hitl"))).data?.requests);
  const [answers, setAnswers] = useState<Record<string, string>>({});
  const [err, setErr] = useState<any>();
  const respond = async (id: string, decision?: "allow" | "deny") => {
    const r = await call(api.POST("/api/v1/hitl/{hitl_id}/respond", { params: { path: { hitl_id: id } }, body: { text: answers[id] || "", ...(decision ? { decision } : {}) } }));
    setErr(r.error);
  };
  return html`<section><h1>HITL inbox</h1><${Err} e=${err} />${(reqs || []).length === 0 ? html`<p class="muted">Nothing waits for a human.</p>` : ""}
    ${(reqs || []).map((q: S["HITLRequest"]) => html`<article class="card hitl" data-testid=${"hitl-row-" + q.hitl_id}>
      <h2>${q.task_id ? html`Task <a href=${"#/task/" + q.task_id}>${q.task_id}</a>` : html`Mission ${q.mission_id}`} <span class="muted">${ago(q.created_at)}</span></h2>
      <p class="prompt">${q.prompt}</p>${q.context ? html`<pre>${q.context}</pre>` : ""}
      ${!canWrite() ? html`<${ReadOnly} what="answering is for an operator" />` : html`<label>Answer <input value=${answers[q.hitl_id] || ""} onInput=${(e: any) => { const v = e.target.value; setAnswers((a) => ({ ...a, [q.hitl_id]: v })); }} data-testid=${"hitl-text-" + q.hitl_id} /></label>
      ${q.tool_name ? html`<button data-testid=${"hitl-allow-" + q.hitl_id} onClick=${() => respond(q.hitl_id, "allow")}>Allow</button>
        <button data-testid=${"hitl-deny-" + q.hitl_id} onClick=${() => respond(q.hitl_id, "deny")}>Deny</button>` :
        html`<button data-testid=${"hitl-send-" + q.hitl_id} onClick=${() => respond(q.hitl_id)}>Send</button>`}`}
    </article>`)}</section>`;
}

const taskStates = ["", "pending", "staging", "provisioning", "ready", "running", "completing", "completed", "failed", "failed_preserved", "cancelled"];

function Tasks() {
  const [state, setState] = useState("");
  const [label, setLabel] = useState("");
  const tasks = useLive(["tasks"], async () => (await call(api.GET("/api/v1/tasks", { params: { query: { state: state || undefined, label: label ? [label] : undefined, limit: 200 } as any } }))).data?.tasks, [state, label]);
  return html`<section><h1>Tasks ${canWrite() ? html`<a class="button" href="#/newtask" data-testid="new-task">New task</a>` : ""}</h1>
    <form class="inline" onSubmit=${(e: Event) => e.preventDefault()}><label>State <select value=${state} onChange=${(e: any) => setState(e.target.value)}>
      ${taskStates.map((s) => html`<option value=${s}>${s || "any"}</option>`)}</select></label>
      <label>Label <input placeholder="key=value" value=${label} onChange=${(e: any) => setLabel(e.target.value)} /></label></form>
    ${tasks && tasks.length === 0 ? html`<p class="empty" data-testid="tasks-empty">${state || label ? "No task matches these filters." : !canWrite() ? "No tasks." :
      html`No tasks: <a href="#/newtask">New task</a> submits a manifest (a repository and a command), as does <code>agenticctl task submit -f task.yaml</code>.`}</p>` : ""}
    <table hidden=${!tasks || tasks.length === 0}><thead><tr><th>Task</th><th>State</th><th>Activity</th><th>Runtime</th><th>Created</th></tr></thead><tbody>
    ${(tasks || []).map((t: S["Task"]) => html`<tr data-testid=${"task-row-" + t.id}><td><a href=${"#/task/" + t.id}>${t.name}</a> <code class="muted">${t.id}</code></td>
      <td><span class=${"pill " + t.state}>${t.state}</span>${t.reason ? html` <span class="muted">${t.reason}</span>` : ""}</td>
      <td>${t.progress.activity || "-"} <span class="muted">${ago(t.progress.last_activity_at)}</span></td><td>${t.environment.runtime}</td><td>${ago(t.created_at)}</td></tr>`)}</tbody></table></section>`;
}

const sampleManifest = `metadata: {name: my-task}
repository: {url: /path/to/repo, branch: main}
command: {argv: [sh, -c, "echo hello > REPORT.md"]}
environment: {runtime: host}
lifecycle: {timeout: 30m, artifact_patterns: [REPORT.md]}
`;

// fieldErrors splits "invalid manifest: a.b: msg; c[0]: msg" into fields.
function fieldErrors(msg: string): { path: string; message: string }[] {
  const body = msg.replace(/^invalid manifest:\s*/, "");
  return body.split("; ").map((p) => {
    const m = p.match(/^([A-Za-z_][\w.\[\]-]*): (.*)$/);
    return m ? { path: m[1], message: m[2] } : { path: "", message: p };
  });
}

async function postManifest(doc: string, dryRun: boolean) {
  const r = await fetch("/api/v1/tasks" + (dryRun ? "?dry_run=true" : ""), {
    method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/yaml" }, body: doc,
  }).catch(() => null);
  if (!r) return { status: 0, body: { error: "the server cannot be reached" } as any };
  return { status: r.status, body: await r.json().catch(() => ({})) };
}

function NewTask() {
  const [doc, setDoc] = useState(sampleManifest);
  const [errs, setErrs] = useState<{ path: string; message: string }[]>([]);
  const [ok, setOk] = useState("");
  useEffect(() => {
    // The server's dry run, as the manifest is typed.
    const t = setTimeout(async () => {
      const r = await postManifest(doc, true);
      if (r.status === 200) { setErrs([]); setOk("valid"); } else { setErrs(fieldErrors(r.body.error || "")); setOk(""); }
    }, 300);
    return () => clearTimeout(t);
  }, [doc]);
  const submit = async (ev: Event) => {
    ev.preventDefault();
    const r = await postManifest(doc, false);
    if (r.status === 202 || r.status === 200) go("task", r.body.task_id || r.body.id);
    else setErrs(fieldErrors(r.body.error || `HTTP ${r.status}`));
  };
  return html`<section><h1>New task</h1><form onSubmit=${submit}>
    <label for="manifest">Manifest (YAML)</label>
    <textarea id="manifest" rows="14" spellcheck=${false} data-testid="manifest" value=${doc} onInput=${(e: any) => setDoc(e.target.value)}></textarea>
    ${errs.length ? html`<ul class="field-errors" role="alert">${errs.map((e) => html`<li data-testid="manifest-error"><code>${e.path || "manifest"}</code> ${e.message}</li>`)}</ul>` :
      html`<p class="ok" data-testid="manifest-valid">${ok}</p>`}
    <button type="submit" data-testid="task-submit" disabled=${errs.length > 0}>Submit</button></form></section>`;
}

// useTaskEvents follows a task's SSE stream from the start; EventSource
// reconnects by itself with Last-Event-ID, so nothing is doubled.
function useTaskEvents(id: string) {
  const [events, setEvents] = useState<{ type: string; data: any }[]>([]);
  useEffect(() => {
    const es = new EventSource(`/api/v1/tasks/${encodeURIComponent(id)}/events`, { withCredentials: true });
    const add = (type: string) => (e: MessageEvent) => setEvents((xs) => [...xs, { type, data: JSON.parse(e.data) }]);
    for (const t of ["state", "activity", "output"]) es.addEventListener(t, add(t) as any);
    es.addEventListener("end", ((e: MessageEvent) => { add("end")(e); es.close(); }) as any);
    return () => es.close();
  }, [id]);
  return events;
}

function Diff({ patch }: { patch: string }) {
  const files = patch.split(/^(?=diff --git )/m).filter((f) => f.startsWith("diff --git"));
  return html`<div class="diff" data-testid="diff">${files.map((f) => {
    const name = (f.match(/^diff --git a\/(.*?) b\//) || [])[1] || "?";
    return html`<details open><summary><code>${name}</code></summary><pre>${f.split("\n").map((l) =>
      html`<span class=${l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : l.startsWith("@@") ? "hunk" : ""}>${l}\n</span>`)}</pre></details>`;
  })}</div>`;
}

function TaskPage({ id }: { id: string }) {
  const task = useLive(["tasks"], async () => (await call(api.GET("/api/v1/tasks/{task_id}", { params: { path: { task_id: id } } }))).data, [id]);
  const arts = useLive(["tasks"], async () => (await call(api.GET("/api/v1/tasks/{task_id}/artifacts", { params: { path: { task_id: id } } }))).data?.artifacts, [id]);
  const events = useTaskEvents(id);
  const [patch, setPatch] = useState("");
  const hasPatch = (arts || []).some((a: S["Artifact"]) => a.name === "changes.patch");
  useEffect(() => {
    if (hasPatch) fetch(`/api/v1/tasks/${encodeURIComponent(id)}/artifacts/changes.patch`, { credentials: "same-origin" }).then((r) => r.text()).then(setPatch).catch(() => {});
  }, [id, hasPatch]);
  const cancel = async () => { await call(api.DELETE("/api/v1/tasks/{task_id}", { params: { path: { task_id: id } } })); };
  if (!task) return html`<p>Loading…</p>`;
  const phases = task.phases;
  const output = events.filter((e) => e.type === "output").map((e) => e.data.data).join("");
  const activity = events.filter((e) => e.type === "activity").map((e) => e.data);
  const ended = ["completed", "failed", "failed_preserved", "cancelled"].includes(task.state);
  return html`<section><h1>${task.name} <code class="muted">${task.id}</code></h1>
    <p>State <span class=${"pill " + task.state} data-testid="task-state">${task.state}</span>${task.reason ? html` <strong>${task.reason}</strong>` : ""}${" "}
      · activity <strong>${task.progress.activity || "-"}</strong> · ${task.progress.tool_calls} tool calls, ${task.progress.turns} turns, $${task.progress.cost_usd.toFixed(4)}
      ${!ended && canWrite() ? html` <button data-testid="task-cancel" onClick=${cancel}>Cancel</button>` : ""}</p>
    ${task.error ? html`<p class="error">${task.error}</p>` : ""}
    ${task.usage ? html`<${InjectedUsage} usage=${task.usage} testid="task-usage" />` : ""}
    ${task.state === "failed_preserved" ? html`<p class="preserved" data-testid="task-preserved">Its environment <a href=${"#/environments"}><code>${task.environment.name}</code></a> is kept for inspection until ${when(task.preserve_until)}, then destroyed. ${canWrite() ? html`<button data-testid="task-destroy-env" onClick=${cancel}>Destroy it now</button>` : ""}</p>` : ""}
    <h2>Phases</h2><ol class="phases">${phases.map((p, i) => {
      const next = phases[i + 1]?.at;
      const d = next ? new Date(next).getTime() - new Date(p.at).getTime() : undefined;
      return html`<li><strong>${p.state}</strong> ${d !== undefined ? html`<span class="muted">${d} ms</span>` : ""}</li>`;
    })}</ol>
    <h2>Transcript</h2>${activity.length === 0 && !output ? html`<p class="muted">No output yet.</p>` : ""}<${Transcript} events=${activity} />
    ${output ? html`<pre class="log" data-testid="task-output">${output}</pre>` : ""}
    <h2>Artifacts</h2><table><thead><tr><th>Name</th><th>Size</th><th>sha256</th><th>Type</th></tr></thead><tbody>
    ${(arts || []).map((a: S["Artifact"]) => html`<tr data-testid=${"artifact-" + a.name}><td><a href=${`/api/v1/tasks/${encodeURIComponent(id)}/artifacts/${a.name.split("/").map(encodeURIComponent).join("/")}`} download>${a.name}</a></td>
      <td>${bytes(a.size)}</td><td><code>${a.sha256}</code></td><td>${a.content_type}</td></tr>`)}</tbody></table>
    ${patch ? html`<h2>changes.patch</h2><${Diff} patch=${patch} />` : ""}</section>`;
}

function App() {
  const c = useConn();
  const route = useRoute();
  // One probe decides whether a sign-in is needed (the cookie is HttpOnly)
  // and who is signed in (GET /api/v1/me): asked again at every sign-in.
  // Already signed in, a return address is gone to at once.
  const [me, setMe] = useState<Me | undefined>(undefined);
  const [first, setFirst] = useState(true);
  useEffect(() => {
    if (!c.signedIn) { setMe(undefined); return; }
    if (me || !c.online && !first) return; // known; or asked again once the server is back
    loadMe().then((r) => {
      if (r.me) setMe(r.me);
      if (first && r.status && r.status !== 401) goOn();
      setFirst(false);
    });
  }, [c.signedIn, c.online]);
  if (!c.signedIn) return html`<${SignIn} />`;
  if (returnTo) return html`<main class="signin"><p data-testid="going-on">Signed in: going on to the preview… (<a href=${returnTo}>continue</a>)</p></main>`;
  if (!me) return html`${!c.online ? html`<div class="offline" role="status" data-testid="offline">Offline: the server cannot be reached; reconnecting…</div>` : ""}<main><p>Loading…</p></main>`;
  const [view, a, b] = route;
  let body;
  switch (view) {
    case "agents": body = html`<${Agents} />`; break;
    case "terminal": body = canWrite() ? html`<${TerminalView} key=${"new-" + b} agentId=${b} />` :
      html`<section><h1>Terminal</h1><${ReadOnly} what="a new shell is for an operator; open a running session from Sessions to watch it" /></section>`; break;
    case "session": body = html`<${TerminalView} key=${a} sessionId=${a} />`; break;
    case "activity": body = html`<${Activity} id=${a} />`; break;
    case "log": body = html`<${Log} id=${a} />`; break;
    case "environments": body = html`<${Environments} />`; break;
    case "environment": body = html`<${EnvironmentPage} key=${a} name=${a} />`; break;
    case "agent": body = html`<${AgentPage} key=${a} id=${a} />`; break;
    case "sessions": body = html`<${Sessions} />`; break;
    case "missions": body = html`<${Missions} />`; break;
    case "hitl": body = html`<${HITL} />`; break;
    case "tasks": body = html`<${Tasks} />`; break;
    case "newtask": body = canWrite() ? html`<${NewTask} />` : html`<section><h1>New task</h1><${ReadOnly} what="submitting a task is for an operator" /></section>`; break;
    case "tokens": body = html`<${Tokens} />`; break;
    case "audit": body = html`<${Audit} />`; break;
    case "task": body = html`<${TaskPage} key=${a} id=${a} />`; break;
    default: body = html`<${Overview} />`;
  }
  return html`${!c.online ? html`<div class="offline" role="status" data-testid="offline">Offline: the server cannot be reached; reconnecting…</div>` : ""}
    <${Nav} at=${view} me=${me} /><main>${body}</main>`;
}

render(html`<${App} />`, document.getElementById("app")!);
