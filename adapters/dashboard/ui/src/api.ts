// The REST client (types generated from openapi.yaml) and the page's
// connection state: every call goes through here, so a dropped server shows
// one "offline" banner and every poller backs off and comes back.
import createClient from "openapi-fetch";
import type { paths } from "./schema";
export type { components } from "./schema";

export const api = createClient<paths>({ baseUrl: "", credentials: "same-origin" });

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
export async function call<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<{ data?: T; error?: { error?: string; code?: string }; status: number }> {
  try {
    const r = await p;
    set(true, r.response.status !== 401);
    return { data: r.data, error: r.error as { error?: string; code?: string } | undefined, status: r.response.status };
  } catch {
    set(false, conn.signedIn);
    return { status: 0, error: { error: "the server cannot be reached", code: "offline" } };
  }
}

export function markOnline(online: boolean) {
  set(online, conn.signedIn);
}

// poll calls f now and then every `every` ms, backing off to 10 s while the
// server is away; the returned function stops it.
export function poll(f: () => Promise<void>, every = 2000): () => void {
  let stopped = false;
  let timer: number | undefined;
  let wait = every;
  const tick = async () => {
    if (stopped) return;
    await f();
    wait = conn.online ? every : Math.min(wait * 2, 10000);
    timer = window.setTimeout(tick, wait);
  };
  tick();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

export async function signIn(token: string): Promise<string | null> {
  const r = await fetch("/api/v1/signin", {
    method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token }),
  }).catch(() => null);
  if (!r) return "the server cannot be reached";
  if (r.status === 204) {
    set(true, true);
    return null;
  }
  const e = await r.json().catch(() => ({}));
  return e.error || `sign-in failed (HTTP ${r.status})`;
}

export async function signOut() {
  await fetch("/api/v1/signout", { method: "POST", credentials: "same-origin" }).catch(() => null);
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
