// The admin's views: named tokens (list, create — the secret shown once —
// and revoke) and the audit log (filtered, a page at a time). The server
// answers both to admins only; another role sees a note, not the view.
import { h } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";
import { api, call, isAdmin, who } from "./api";
import type { components } from "./api";

const html = htm.bind(h);
type S = components["schemas"];

function Err({ e }: { e?: { error?: string } | string }) {
  if (!e) return null;
  return html`<p class="error" role="alert">${typeof e === "string" ? e : e.error}</p>`;
}

function AdminsOnly({ title }: { title: string }) {
  return html`<section><h1>${title}</h1><p class="empty" data-testid="admins-only">Only an admin sees this view; you are signed in as
    <strong>${who.me?.name}</strong> (${who.me?.role}).</p></section>`;
}

const roles = ["viewer", "operator", "admin", "executor"] as const;
const roleNote: Record<string, string> = {
  viewer: "every read; terminals as observer only",
  operator: "everything but tokens and the audit log",
  admin: "everything",
  executor: "an orchestrator's: dispatch, HITL answers, mission reads; cannot sign in here",
};

// parseLabels reads "team=payments, env=prod".
function parseLabels(s: string): Record<string, string> | string {
  const out: Record<string, string> = {};
  for (const part of s.split(",").map((p) => p.trim()).filter((p) => p)) {
    const i = part.indexOf("=");
    if (i <= 0 || i === part.length - 1) return `label "${part}": want key=value`;
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

function time(t?: string) {
  if (!t) return html`<span class="muted">-</span>`;
  return html`<time datetime=${t}>${new Date(t).toLocaleString()}</time>`;
}

function labelsOf(l?: Record<string, string>) {
  const keys = Object.keys(l || {}).sort();
  if (keys.length === 0) return html`<span class="muted">everything</span>`;
  return keys.map((k) => html`<code class="label">${k}=${l![k]}</code> `);
}

export function Tokens() {
  const [tokens, setTokens] = useState<S["Token"][] | undefined>();
  const [err, setErr] = useState<any>();
  const [form, setForm] = useState({ name: "", role: "viewer", labels: "", days: "" });
  const [created, setCreated] = useState<S["TokenCreated"] | null>(null);
  const [copied, setCopied] = useState(false);
  const [confirm, setConfirm] = useState<string | null>(null);
  const load = async () => {
    const r = await call(api.GET("/api/v1/tokens"));
    if (r.data) setTokens(r.data.tokens);
    else if (r.status) setErr(r.error);
  };
  useEffect(() => { if (isAdmin()) load(); }, []);
  if (!isAdmin()) return html`<${AdminsOnly} title="Tokens" />`;
  const set = (k: string) => (e: any) => { const v = e.target.value; setForm((f) => ({ ...f, [k]: v })); };
  const create = async (ev: Event) => {
    ev.preventDefault();
    const labels = parseLabels(form.labels);
    if (typeof labels === "string") { setErr(labels); return; }
    const body: S["TokenRequest"] = { name: form.name.trim(), role: form.role as S["TokenRole"] };
    if (Object.keys(labels).length) body.labels = labels;
    if (form.days) body.expires_at = new Date(Date.now() + Number(form.days) * 86400_000).toISOString();
    const r = await call(api.POST("/api/v1/tokens", { body }));
    setErr(r.error);
    if (r.data) {
      setCreated(r.data);
      setCopied(false);
      setForm({ name: "", role: form.role, labels: "", days: "" });
      await load();
    }
  };
  const revoke = async (name: string) => {
    const r = await call(api.DELETE("/api/v1/tokens/{token}", { params: { path: { token: name } } }));
    setConfirm(null);
    setErr(r.error);
    await load();
  };
  const copy = async () => {
    try { await navigator.clipboard.writeText(created!.token); setCopied(true); } catch { /* the page may not use the clipboard: select it by hand */ }
  };
  const now = Date.now();
  return html`<section><h1>Tokens</h1>
    <p class="muted">Named tokens for people and programs, each with a role and, optionally, a label scope and an expiry. The secret is shown
      once, when it is made; the server keeps only its hash. Revoking a token refuses it at once and ends its dashboard sessions,
      WebSockets and streams.</p>
    <form class="inline" onSubmit=${create} aria-label="Create a token">
      <label>Name <input required maxlength="64" value=${form.name} onInput=${set("name")} data-testid="token-name" placeholder="ci-bot" /></label>
      <label>Role <select value=${form.role} onChange=${set("role")} data-testid="token-role">${roles.map((r) => html`<option value=${r}>${r}</option>`)}</select></label>
      <label>Labels <input value=${form.labels} onInput=${set("labels")} data-testid="token-labels" placeholder="team=payments" title="A label scope: the token sees and makes only items carrying these labels" /></label>
      <label>Expires in <input type="number" min="1" max="3650" value=${form.days} onInput=${set("days")} data-testid="token-expires-days" placeholder="never" style="width:6em" /> days</label>
      <button type="submit" data-testid="token-create">Create</button></form>
    <p class="muted note">${form.role}: ${roleNote[form.role]}.</p>
    <${Err} e=${err} />
    ${created ? html`<div class="card secret" role="status" data-testid="token-created">
      <h2>Token <strong>${created.name}</strong> (${created.role}) created</h2>
      <p>Copy it now: it is <strong>not shown again</strong>.</p>
      <p><code data-testid="token-secret" class="secret-value">${created.token}</code></p>
      <div class="actions"><button data-testid="token-copy" onClick=${copy}>${copied ? "Copied" : "Copy"}</button>
        <button data-testid="token-secret-done" onClick=${() => setCreated(null)}>Done</button></div></div>` : ""}
    ${tokens && tokens.length === 0 ? html`<p class="empty" data-testid="tokens-empty">No named tokens: the operator token is the only one. Create one above, or with <code>agenticctl token create</code>.</p>` : ""}
    <table hidden=${!tokens || tokens.length === 0}><thead><tr><th>Name</th><th>Role</th><th>Labels</th><th>Created</th><th>Expires</th><th></th></tr></thead><tbody>
    ${(tokens || []).map((t) => {
      const expired = !!t.expires_at && new Date(t.expires_at).getTime() <= now;
      return html`<tr data-testid=${"token-row-" + t.name}><td><strong>${t.name}</strong>${t.name === who.me?.name ? html` <span class="pill" title="this page is signed in with it: revoking it signs you out">you</span>` : ""} <code class="muted small">${t.id}</code></td>
        <td><span class="pill role">${t.role}</span></td><td>${labelsOf(t.labels)}</td><td>${time(t.created_at)}</td>
        <td>${t.expires_at ? html`${time(t.expires_at)}${expired ? html` <span class="pill failed">expired</span>` : ""}` : html`<span class="muted">never</span>`}</td>
        <td class="actions">${confirm === t.name ?
          html`<button class="danger" data-testid=${"token-revoke-confirm-" + t.name} onClick=${() => revoke(t.name)}>Revoke ${t.name}</button>
            <button data-testid=${"token-revoke-cancel-" + t.name} onClick=${() => setConfirm(null)}>Keep</button>` :
          html`<button data-testid=${"token-revoke-" + t.name} onClick=${() => setConfirm(t.name)}>Revoke</button>`}</td></tr>`;
    })}</tbody></table></section>`;
}

type AuditQuery = { actor: string; target: string; since: string; limit: number };

export function Audit() {
  const [form, setForm] = useState<AuditQuery>({ actor: "", target: "", since: "", limit: 50 });
  const [q, setQ] = useState<AuditQuery>(form);
  // cursors[i] is where page i starts ("" the first).
  const [cursors, setCursors] = useState<string[]>([""]);
  const [page, setPage] = useState<{ entries: S["AuditEntry"][]; next?: string } | undefined>();
  const [err, setErr] = useState<any>();
  const [tick, setTick] = useState(0);
  const at = cursors[cursors.length - 1];
  useEffect(() => {
    if (!isAdmin()) return;
    let gone = false;
    (async () => {
      const query: Record<string, unknown> = { limit: q.limit };
      if (q.actor) query.actor = q.actor;
      if (q.target) query.target = q.target;
      if (q.since) query.since = new Date(q.since).toISOString();
      if (at) query.cursor = at;
      const r = await call(api.GET("/api/v1/audit", { params: { query: query as any } }));
      if (gone) return;
      setErr(r.error);
      if (r.data) setPage({ entries: r.data.entries, next: r.data.next_cursor });
    })();
    return () => { gone = true; };
  }, [q, at, tick]);
  if (!isAdmin()) return html`<${AdminsOnly} title="Audit" />`;
  const set = (k: keyof AuditQuery) => (e: any) => { const v = e.target.value; setForm((f) => ({ ...f, [k]: k === "limit" ? Number(v) : v })); };
  const apply = (ev: Event) => { ev.preventDefault(); setQ(form); setCursors([""]); setTick((n) => n + 1); };
  return html`<section><h1>Audit <button data-testid="audit-refresh" onClick=${() => setTick((n) => n + 1)}>Refresh</button></h1>
    <p class="muted">Every state-changing call, answered or refused, and every sign-in: oldest first. Reads are not recorded.</p>
    <form class="inline" onSubmit=${apply} aria-label="Filter the audit log">
      <label>Actor <input value=${form.actor} onInput=${set("actor")} data-testid="audit-actor" placeholder="token name" /></label>
      <label>Target <input value=${form.target} onInput=${set("target")} data-testid="audit-target" placeholder="e.g. an agent or session id" /></label>
      <label>Since <input type="datetime-local" value=${form.since} onInput=${set("since")} data-testid="audit-since" /></label>
      <label>Per page <select value=${String(form.limit)} onChange=${set("limit")} data-testid="audit-limit">${[10, 50, 100, 200, 500].map((n) => html`<option value=${n}>${n}</option>`)}</select></label>
      <button type="submit" data-testid="audit-apply">Apply</button></form>
    <${Err} e=${err} />
    ${page && page.entries.length === 0 ? html`<p class="empty" data-testid="audit-empty">${q.actor || q.target || q.since ? "No entry matches these filters." : "Nothing recorded yet."}</p>` : ""}
    <table hidden=${!page || page.entries.length === 0} data-testid="audit-table"><thead><tr><th>When</th><th>Actor</th><th>Role</th><th>Client</th><th>Operation</th><th>Target</th><th>Status</th><th>Request id</th></tr></thead><tbody>
    ${(page?.entries || []).map((e) => html`<tr data-testid="audit-row" class=${e.status >= 400 ? "refused" : ""}><td>${time(e.at)}</td><td><strong>${e.actor}</strong></td><td>${e.role || html`<span class="muted">-</span>`}</td>
      <td><code class="small">${e.client}</code></td><td><code>${e.operation}</code></td><td>${e.target ? html`<code class="small">${e.target}</code>` : html`<span class="muted">-</span>`}</td>
      <td><span class=${"pill " + (e.status >= 400 ? "failed" : "ready")}>${e.status}</span>${e.code ? html` <span class="small">${e.code}</span>` : ""}</td>
      <td><code class="muted small">${e.request_id}</code></td></tr>`)}</tbody></table>
    <p class="pager">${cursors.length > 1 ? html`<button data-testid="audit-first" onClick=${() => setCursors([""])}>First page</button>
      <button data-testid="audit-prev" onClick=${() => setCursors((c) => c.slice(0, -1))}>Previous</button>` : ""}
      <span class="muted">page ${cursors.length}</span>
      ${page?.next ? html`<button data-testid="audit-next" onClick=${() => setCursors((c) => [...c, page.next!])}>Next page</button>` : ""}</p></section>`;
}
