// The REST client (the TypeScript SDK, sdk/typescript: types generated from
// openapi.yaml), the page's connection state and the server's change stream:
// every call goes through here, so a dropped server shows one "offline"
// banner, and every live view reloads when the stream comes back.
import { createClient, type ErrorBody } from "@agentic-sandbox/client";
import type { components } from "@agentic-sandbox/client";
export type { components };

// The page's own origin, signed in by the session cookie. `client` has the
// SDK's methods (errors thrown as ApiError); `api` is its typed raw client
// (openapi-fetch: every path of openapi.yaml), whose answers `call` reads.
export const client = createClient({ baseUrl: "", credentials: "same-origin" });
export const api = client.raw;

type Listener = () => void;
const listeners = new Set<Listener>();
export const conn = { online: true, signedIn: true };

export function onConn(l: Listener): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}

function set(online: boolean, signedIn: boolean) {
  if (conn.online === online && conn.signedIn === signedIn) return;
  conn.online = online;
  conn.signedIn = signedIn;
  listeners.forEach((l) => l());
}

// call runs one request and records what it says of the connection: a
// network error is offline, a 401 is signed out.
export async function call<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<{ data?: T; error?: Partial<ErrorBody>; status: number }> {
  try {
    const r = await p;
    set(true, r.response.status !== 401);
    return { data: r.data, error: r.error as Partial<ErrorBody> | undefined, status: r.response.status };
  } catch {
    set(false, conn.signedIn);
    return { status: 0, error: { error: "the server cannot be reached", code: "offline" } };
  }
}

// request is a JSON call by method and path, for what the typed client
// does not name: its answer has the typed client's shape, so `call` reads it.
export async function request(method: string, path: string, body?: unknown): Promise<{ data?: any; error?: unknown; response: Response }> {
  const response = await fetch(path, {
    method, credentials: "same-origin",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await response.json().catch(() => undefined);
  if (response.ok) return { data: json ?? {}, response };
  return { error: json ?? { error: `HTTP ${response.status}` }, response };
}

export function markOnline(online: boolean) {
  set(online, conn.signedIn);
}

// The server's change stream (GET /api/v1/changes): one per page, shared by
// every live view. A view reloads its list when the stream names it, and
// everything reloads when the stream (re)connects, so nothing is missed
// across a dropped connection.
export type Kind = "agents" | "environments" | "sessions" | "missions" | "hitl" | "tasks" | "agent_metrics" | "ports";
const kindListeners = new Map<Kind, Set<() => void>>();
let stream: EventSource | null = null;
let retry = 1000;

// Heartbeats of many agents would reload a metrics view four times a
// second: metrics-only changes reach views at most every few seconds.
const metricsGap = 3000;
let metricsLast = 0;
let metricsTimer: number | undefined;

function announce(kinds: Kind[]) {
  for (const k of kinds) {
    if (k === "agent_metrics") {
      const wait = metricsLast + metricsGap - Date.now();
      if (wait > 0) {
        metricsTimer ??= window.setTimeout(() => { metricsTimer = undefined; announce(["agent_metrics"]); }, wait);
        continue;
      }
      metricsLast = Date.now();
    }
    kindListeners.get(k)?.forEach((l) => l());
  }
}

function openStream() {
  if (stream || kindListeners.size === 0 || !conn.signedIn) return;
  const es = new EventSource("/api/v1/changes");
  stream = es;
  es.addEventListener("hello", (e) => {
    retry = 1000;
    set(true, true);
    announce(JSON.parse((e as MessageEvent).data).kinds);
  });
  es.addEventListener("changed", (e) => announce(JSON.parse((e as MessageEvent).data).kinds));
  es.onerror = () => {
    // The browser retries by itself unless the answer was not a stream
    // (a 401, a restarted server's 5xx): then this page does, with backoff,
    // and a request tells whether it is offline or signed out.
    if (es.readyState !== EventSource.CLOSED) {
      set(false, conn.signedIn);
      return;
    }
    stream = null;
    const wait = retry;
    retry = Math.min(retry * 2, 10000);
    window.setTimeout(async () => {
      await call(api.GET("/api/v1/agents"));
      openStream();
    }, wait);
  };
}

onConn(() => {
  if (conn.signedIn) openStream();
  else if (stream) {
    stream.close();
    stream = null;
  }
});

// live calls f now, whenever the server says one of kinds changed, and
// every `every` ms as a safety net (ages, clocks); the returned function
// stops it. Reloads never overlap: a change during one runs one more.
export function live(kinds: Kind[], f: () => Promise<void>, every = 30000): () => void {
  let stopped = false, running = false, again = false;
  const run = async () => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await f();
    } finally {
      running = false;
    }
    if (again) {
      again = false;
      run();
    }
  };
  for (const k of kinds) {
    if (!kindListeners.has(k)) kindListeners.set(k, new Set());
    kindListeners.get(k)!.add(run);
  }
  openStream();
  run();
  const timer = window.setInterval(run, every);
  return () => {
    stopped = true;
    window.clearInterval(timer);
    for (const k of kinds) kindListeners.get(k)?.delete(run);
  };
}

// who is the signed-in caller (GET /api/v1/me): its token's name and role.
// The page shows only what the role may do (the server enforces it on
// every call regardless): a viewer reads, an operator also acts, an admin
// also manages tokens and reads the audit log.
export type Me = components["schemas"]["Me"];
export const who: { me?: Me } = {};

export async function loadMe(): Promise<{ me?: Me; status: number }> {
  const r = await call(api.GET("/api/v1/me"));
  if (r.data) who.me = r.data;
  return { me: r.data, status: r.status };
}

// canWrite: the role may change state (operator, admin); isAdmin: tokens
// and the audit log too.
export const canWrite = () => who.me?.role === "operator" || who.me?.role === "admin";
export const isAdmin = () => who.me?.role === "admin";

export async function signIn(token: string): Promise<string | null> {
  const r = await api.POST("/api/v1/signin", { body: { token } }).catch(() => null);
  if (!r) return "the server cannot be reached";
  if (r.response.status === 204) {
    set(true, true);
    return null;
  }
  return r.error?.error || `sign-in failed (HTTP ${r.response.status})`;
}

export async function signOut() {
  await api.POST("/api/v1/signout").catch(() => null);
  who.me = undefined;
  set(conn.online, false);
}

export function bytes(n?: number): string {
  if (n === undefined) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

export function ago(t?: string): string {
  if (!t) return "-";
  const s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return `${Math.max(s, 0)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  return `${Math.round(s / 3600)}h ago`;
}

// wsURL is the client WebSocket the server names in the page.
export function wsURL(): string {
  const m = document.querySelector('meta[name="agentic-ws"]') as HTMLMetaElement | null;
  return m?.content || `${location.protocol === "https:" ? "wss" : "ws"}://${location.hostname}:${Number(location.port) - 1}/ws`;
}
