// @agentic-sandbox/client: a small typed client of the agentic-sandbox
// management REST API. The types (./schema.ts) are generated from the
// repository's openapi.yaml by `make generate`; every operation is reachable,
// fully typed, through `client.raw` (openapi-fetch), and the common ones have
// a method here that returns the answer's data or throws an ApiError.
import createFetchClient from "openapi-fetch";
import type { Client as FetchClient } from "openapi-fetch";
import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };

type S = components["schemas"];
/** Every REST error body: `{"error": "a message for people", "code": "snake_case_code"}`. */
export type ErrorBody = S["Error"];
export type Agent = S["Agent"];
export type AgentList = S["AgentList"];
export type ExecRequest = S["ExecRequest"];
export type ExecResult = S["ExecResult"];
export type CommandStatus = S["CommandStatus"];
export type Runtime = S["Runtime"];
export type RuntimeList = S["RuntimeList"];
export type Environment = S["Environment"];
export type EnvironmentList = S["EnvironmentList"];
export type EnvironmentState = Environment["state"];
export type CreateEnvironmentRequest = S["CreateEnvironmentRequest"];
export type FileListing = S["FileListing"];
export type FileEntry = S["FileEntry"];
export type Session = S["Session"];
export type SessionList = S["SessionList"];
export type SessionState = S["SessionState"];
export type CreateSessionRequest = S["CreateSessionRequest"];
export type SessionKilled = S["SessionKilled"];

/** The openapi-fetch client over every path of openapi.yaml. */
export type RawClient = FetchClient<paths>;

/**
 * An answer of the server other than 2xx, or a request that could not be
 * answered as the API says. `code` is the server's stable code (e.g.
 * `agent_not_found`, `environment_exists`); `status` the HTTP status.
 */
export class ApiError extends Error implements ErrorBody {
  override readonly name = "ApiError";
  /** The HTTP status (0 when no answer came). */
  readonly status: number;
  /** The server's stable snake_case code. */
  readonly code: string;
  /** The server's message for people. */
  readonly error: string;
  /** Seconds the server asks to wait before retrying (429, 503), when it says. */
  readonly retryAfter?: number;

  constructor(status: number, body: ErrorBody, retryAfter?: number) {
    super(`${body.error} (${body.code}, HTTP ${status})`);
    this.status = status;
    this.code = body.code;
    this.error = body.error;
    if (retryAfter !== undefined) this.retryAfter = retryAfter;
  }

  /** The error body as the server sent it. */
  get body(): ErrorBody {
    return { error: this.error, code: this.code };
  }

  /** An ApiError from an answer; a body that is not `{error, code}` (a proxy's page) is kept as the message. */
  static from(response: Response, body: unknown): ApiError {
    const ra = response.headers.get("Retry-After");
    const retryAfter = ra !== null && /^\d+$/.test(ra) ? Number(ra) : undefined;
    if (isErrorBody(body)) return new ApiError(response.status, body, retryAfter);
    const text = typeof body === "string" && body !== "" ? body.slice(0, 500) : response.statusText || "no error body";
    return new ApiError(response.status, { error: text, code: `http_${response.status}` }, retryAfter);
  }
}

/** Whether v is an error body `{error, code}`. */
export function isErrorBody(v: unknown): v is ErrorBody {
  return typeof v === "object" && v !== null && typeof (v as ErrorBody).error === "string" && typeof (v as ErrorBody).code === "string";
}

/** Whether e is an ApiError, with the given code when one is named. */
export function isApiError(e: unknown, code?: string): e is ApiError {
  return e instanceof ApiError && (code === undefined || e.code === code);
}

export interface ClientOptions {
  /**
   * The server's REST address (agentic-mgmt listens on the agent port + 2,
   * `http://127.0.0.1:8122` by default). In a page the server serves, "" (the
   * page's own origin).
   */
  baseUrl: string;
  /** The operator token, sent as `Authorization: Bearer <token>`. Without it, the dashboard's session cookie (browsers). */
  token?: string;
  /** The fetch to use (default the global one). */
  fetch?: typeof globalThis.fetch;
  /** Credentials mode of browser requests, e.g. "same-origin" for the dashboard's cookie. */
  credentials?: RequestCredentials;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

/** Options every method takes. */
export interface CallOptions {
  /** Aborts the request (an exec's command is killed when its caller goes away). */
  signal?: AbortSignal;
}

/** A plain read of a session's output log (GET /api/v1/sessions/{id}/output). */
export interface SessionOutput {
  /** The bytes, from `start` to `end`. */
  data: Uint8Array;
  /** Offset of the first byte. */
  start: number;
  /** Offset after the last byte: read on from here. */
  end: number;
  /** Set when bytes before `start` (from the requested offset) are missing, and why. */
  gap?: "dropped" | "not_stored";
  /** How many bytes of the session's output could not be stored so far. */
  lost: number;
}

export interface WaitOptions extends CallOptions {
  /** Give up (an Error) after this long; default 5 minutes. */
  timeoutMs?: number;
  /** Between two looks; default 250 ms. */
  intervalMs?: number;
}

const liveSessionStates: ReadonlySet<SessionState> = new Set<SessionState>(["starting", "running"]);

/** The typed client. */
export class AgenticClient {
  /** Every operation of openapi.yaml, typed (openapi-fetch): `client.raw.GET("/api/v1/agents")`. */
  readonly raw: RawClient;
  private readonly baseUrl: string;
  private readonly fetchFn: typeof globalThis.fetch;
  private readonly headers: Record<string, string>;
  private readonly credentials?: RequestCredentials;

  constructor(opts: ClientOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.fetchFn = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.headers = { ...opts.headers };
    if (opts.token) this.headers.Authorization = `Bearer ${opts.token}`;
    if (opts.credentials !== undefined) this.credentials = opts.credentials;
    this.raw = createFetchClient<paths>({
      baseUrl: this.baseUrl,
      fetch: (req: Request) => this.fetchFn(req),
      headers: this.headers,
      ...(opts.credentials !== undefined ? { credentials: opts.credentials } : {}),
    });
  }

  // --- agents

  /** Agents known to the server, sorted by id (every one without `limit`; a page with it). */
  async listAgents(page: { limit?: number; cursor?: string } = {}, o: CallOptions = {}): Promise<AgentList> {
    return data(await this.raw.GET("/api/v1/agents", { params: { query: page }, signal: o.signal }));
  }

  /** One agent; ApiError `agent_not_found` when there is none. */
  async getAgent(agentId: string, o: CallOptions = {}): Promise<Agent> {
    return data(await this.raw.GET("/api/v1/agents/{agent_id}", { params: { path: { agent_id: agentId } }, signal: o.signal }));
  }

  /**
   * Runs a command on an agent and waits for its result, whatever its exit
   * code (`exit_code`, `success`; 127 and `error` when the program could not
   * start). Output is in `stdout`/`stderr`, base64 when `encoding` says so:
   * see outputText/outputBytes.
   */
  async exec(agentId: string, req: ExecRequest, o: CallOptions = {}): Promise<ExecResult> {
    // Without an Accept of application/x-ndjson the answer is the JSON ExecResult.
    return data(await this.raw.POST("/api/v1/agents/{agent_id}/exec", { params: { path: { agent_id: agentId } }, body: req, signal: o.signal })) as ExecResult;
  }

  // --- runtimes and environments

  /** The runtimes this server provisions environments with. */
  async listRuntimes(o: CallOptions = {}): Promise<Runtime[]> {
    return data(await this.raw.GET("/api/v1/runtimes", { signal: o.signal })).runtimes;
  }

  /** Environments, by name (every one without `limit`). */
  async listEnvironments(page: { limit?: number; cursor?: string } = {}, o: CallOptions = {}): Promise<EnvironmentList> {
    return data(await this.raw.GET("/api/v1/environments", { params: { query: page }, signal: o.signal }));
  }

  /** Starts provisioning an environment (and its agent, of the same name); see waitEnvironment. */
  async createEnvironment(req: CreateEnvironmentRequest, o: CallOptions = {}): Promise<Environment> {
    return data(await this.raw.POST("/api/v1/environments", { body: req, signal: o.signal }));
  }

  /** One environment; ApiError `environment_not_found` when there is none. */
  async getEnvironment(name: string, o: CallOptions = {}): Promise<Environment> {
    return data(await this.raw.GET("/api/v1/environments/{name}", { params: { path: { name } }, signal: o.signal }));
  }

  /** Destroys an environment and everything it used. */
  async deleteEnvironment(name: string, o: CallOptions = {}): Promise<void> {
    await data(await this.raw.DELETE("/api/v1/environments/{name}", { params: { path: { name } }, signal: o.signal }));
  }

  /** Stops an environment, keeping it for startEnvironment. */
  async stopEnvironment(name: string, o: CallOptions = {}): Promise<Environment> {
    return data(await this.raw.POST("/api/v1/environments/{name}/stop", { params: { path: { name } }, signal: o.signal }));
  }

  /** Starts a stopped environment; see waitEnvironment. */
  async startEnvironment(name: string, o: CallOptions = {}): Promise<Environment> {
    return data(await this.raw.POST("/api/v1/environments/{name}/start", { params: { path: { name } }, signal: o.signal }));
  }

  /**
   * Waits until an environment is in state `until` (default "ready") and
   * returns it; an Error when it fails (with the environment's `error`) or
   * the wait times out.
   */
  async waitEnvironment(name: string, until: EnvironmentState = "ready", o: WaitOptions = {}): Promise<Environment> {
    return poll(o, `environment ${name} to be ${until}`, async () => {
      const env = await this.getEnvironment(name, o);
      if (env.state === until) return env;
      if (env.state === "failed") throw new Error(`environment ${name} failed: ${env.error ?? "no error given"}`);
      return undefined;
    });
  }

  // --- files (as the agent's user; relative paths from the agent's working directory)

  /** A directory's entries, or the one entry of a file. */
  async listFiles(agentId: string, path: string, o: CallOptions = {}): Promise<FileListing> {
    return data(await this.raw.GET("/api/v1/agents/{agent_id}/files", { params: { path: { agent_id: agentId }, query: { path } }, signal: o.signal }));
  }

  /** A regular file's bytes. */
  async readFile(agentId: string, path: string, o: CallOptions = {}): Promise<Uint8Array> {
    const r = await this.request("GET", `/api/v1/agents/${enc(agentId)}/files/content`, { path }, undefined, o);
    return new Uint8Array(await r.arrayBuffer());
  }

  /** A regular file's bytes as UTF-8 text. */
  async readTextFile(agentId: string, path: string, o: CallOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.readFile(agentId, path, o));
  }

  /**
   * Writes a file (text as UTF-8), atomically: parent directories are made;
   * `mode` is octal permission bits such as "0644" (the default) or "755".
   */
  async writeFile(agentId: string, path: string, content: string | Uint8Array, opts: CallOptions & { mode?: string } = {}): Promise<void> {
    const query: Record<string, string> = { path };
    if (opts.mode !== undefined) query.mode = opts.mode;
    const body = typeof content === "string" ? new TextEncoder().encode(content) : content;
    await this.request("PUT", `/api/v1/agents/${enc(agentId)}/files/content`, query, body, opts);
  }

  /** Deletes a file, symlink or empty directory; a whole tree with `recursive`. */
  async deleteFile(agentId: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    const query = opts.recursive ? { path, recursive: true } : { path };
    await data(await this.raw.DELETE("/api/v1/agents/{agent_id}/files", { params: { path: { agent_id: agentId }, query }, signal: opts.signal }));
  }

  // --- sessions

  /** Sessions on every agent (or one agent's, or in one state), oldest first. */
  async listSessions(filter: { agent_id?: string; state?: SessionState; limit?: number; cursor?: string } = {}, o: CallOptions = {}): Promise<SessionList> {
    return data(await this.raw.GET("/api/v1/sessions", { params: { query: filter }, signal: o.signal }));
  }

  /** Starts a session on an agent (background by default); its output goes to the session log. */
  async createSession(agentId: string, req: CreateSessionRequest, o: CallOptions = {}): Promise<Session> {
    return data(await this.raw.POST("/api/v1/agents/{agent_id}/sessions", { params: { path: { agent_id: agentId } }, body: req, signal: o.signal }));
  }

  /** One session; ApiError `session_not_found` when there is none. */
  async getSession(sessionId: string, o: CallOptions = {}): Promise<Session> {
    return data(await this.raw.GET("/api/v1/sessions/{session_id}", { params: { path: { session_id: sessionId } }, signal: o.signal }));
  }

  /** Kills a session's whole process group. */
  async killSession(sessionId: string, o: CallOptions = {}): Promise<SessionKilled> {
    return data(await this.raw.DELETE("/api/v1/sessions/{session_id}", { params: { path: { session_id: sessionId } }, signal: o.signal }));
  }

  /**
   * Reads a session's output log from `from` (default the first byte held),
   * at most `max` bytes; with `follow`, waits (up to 30 s on the server) for
   * output when at the end. Continue from the answer's `end`.
   */
  async readSessionOutput(sessionId: string, opts: CallOptions & { from?: number; max?: number; follow?: boolean } = {}): Promise<SessionOutput> {
    const query: Record<string, string | number | boolean> = {};
    if (opts.from !== undefined) query.from = opts.from;
    if (opts.max !== undefined) query.max = opts.max;
    if (opts.follow) query.follow = true;
    const r = await this.request("GET", `/api/v1/sessions/${enc(sessionId)}/output`, query, undefined, opts);
    const out: SessionOutput = {
      data: new Uint8Array(await r.arrayBuffer()),
      start: Number(r.headers.get("X-Output-Start") ?? 0),
      end: Number(r.headers.get("X-Output-End") ?? 0),
      lost: Number(r.headers.get("X-Output-Lost") ?? 0),
    };
    if (r.headers.get("X-Output-Gap") === "true") out.gap = r.headers.get("X-Output-Gap-Reason") === "not_stored" ? "not_stored" : "dropped";
    return out;
  }

  /** Waits until a session has ended (exited, killed or lost) and returns it. */
  async waitSession(sessionId: string, o: WaitOptions = {}): Promise<Session> {
    return poll(o, `session ${sessionId} to end`, async () => {
      const s = await this.getSession(sessionId, o);
      return liveSessionStates.has(s.state) ? undefined : s;
    });
  }

  /** Reads a session's whole output log (as held) as UTF-8 text. */
  async sessionOutputText(sessionId: string, o: CallOptions = {}): Promise<string> {
    const parts: Uint8Array[] = [];
    let from: number | undefined;
    for (;;) {
      const r = await this.readSessionOutput(sessionId, { ...o, ...(from !== undefined ? { from } : {}) });
      if (r.data.length === 0) break;
      parts.push(r.data);
      from = r.end;
    }
    return new TextDecoder().decode(concat(parts));
  }

  // A request openapi-fetch does not shape well (raw bytes in or out):
  // the same base URL, headers and fetch, and the same errors.
  private async request(method: string, path: string, query: Record<string, string | number | boolean>, body: Uint8Array | undefined, o: CallOptions): Promise<Response> {
    const qs = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)])).toString();
    const headers: Record<string, string> = { ...this.headers };
    if (body !== undefined) headers["Content-Type"] = "application/octet-stream";
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = body as Uint8Array<ArrayBuffer>;
    if (o.signal) init.signal = o.signal;
    if (this.credentials !== undefined) init.credentials = this.credentials;
    const r = await this.fetchFn(`${this.baseUrl}${path}${qs ? `?${qs}` : ""}`, init);
    if (!r.ok) {
      const text = await r.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON: kept as text
      }
      throw ApiError.from(r, parsed);
    }
    return r;
  }
}

/** A client of the server at opts.baseUrl. */
export function createClient(opts: ClientOptions): AgenticClient {
  return new AgenticClient(opts);
}

/** An exec result's stdout or stderr as bytes (decoding base64 when `encoding` says so). */
export function outputBytes(r: Pick<ExecResult, "stdout" | "stderr" | "encoding">, stream: "stdout" | "stderr" = "stdout"): Uint8Array {
  const s = r[stream];
  if (r.encoding === "base64") {
    const bin = atob(s);
    const b = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) b[i] = bin.charCodeAt(i);
    return b;
  }
  return new TextEncoder().encode(s);
}

/** An exec result's stdout or stderr as text. */
export function outputText(r: Pick<ExecResult, "stdout" | "stderr" | "encoding">, stream: "stdout" | "stderr" = "stdout"): string {
  return r.encoding === "base64" ? new TextDecoder().decode(outputBytes(r, stream)) : r[stream];
}

// data is an openapi-fetch answer's data, or its error as an ApiError.
function data<T>(r: { data?: T; error?: unknown; response: Response }): T {
  if (!r.response.ok || r.error !== undefined) throw ApiError.from(r.response, r.error);
  return r.data as T;
}

function enc(s: string): string {
  return encodeURIComponent(s);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

async function poll<T>(o: WaitOptions, what: string, look: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + (o.timeoutMs ?? 5 * 60_000);
  for (;;) {
    const v = await look();
    if (v !== undefined) return v;
    if (Date.now() >= deadline) throw new Error(`timed out waiting for ${what}`);
    if (o.signal?.aborted) throw o.signal.reason ?? new Error("aborted");
    await new Promise((resolve) => setTimeout(resolve, o.intervalMs ?? 250));
  }
}
