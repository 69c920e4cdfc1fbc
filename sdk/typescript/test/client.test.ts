// The SDK against a real agentic-mgmt: AGENTIC_URL, AGENTIC_TOKEN and
// AGENTIC_AGENT (a connected host agent) name it. `make test` runs this
// through cmd/internal/e2e (TestSDKTypeScript), which starts the server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { ApiError, createClient, isApiError, outputBytes, outputText, type ErrorBody } from "@agentic-sandbox/client";

const url = process.env.AGENTIC_URL;
const token = process.env.AGENTIC_TOKEN;
const agent = process.env.AGENTIC_AGENT ?? "host-01";
if (!url || !token) {
  throw new Error("set AGENTIC_URL and AGENTIC_TOKEN to a running agentic-mgmt (or run: go test -run TestSDKTypeScript ./cmd/internal/e2e/)");
}
const client = createClient({ baseUrl: url, token });
const wait = { timeoutMs: 120_000 };

// rejects asserts that p fails with an ApiError of status and code, and
// returns it.
async function rejects(p: Promise<unknown>, status: number, code: string): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof ApiError, `not an ApiError: ${String(e)}`);
    assert.equal(e.code, code, e.message);
    assert.equal(e.status, status, e.message);
    assert.ok(e.error.length > 0, "an error without a message");
    const body: ErrorBody = e.body;
    assert.deepEqual(body, { error: e.error, code });
    return e;
  }
  assert.fail(`no error; want ${status} ${code}`);
}

test("lists agents and gets one", async () => {
  const { agents } = await client.listAgents();
  const a = agents.find((x) => x.id === agent);
  assert.ok(a, `${agent} not listed: ${agents.map((x) => x.id).join(", ")}`);
  assert.equal(a.status, "ready");
  assert.equal(a.runtime, "host");
  const one = await client.getAgent(agent);
  assert.equal(one.id, agent);
  const page = await client.listAgents({ limit: 1 });
  assert.equal(page.agents.length, 1);
});

test("errors are ApiError with the server's {error, code}", async () => {
  const e = await rejects(client.getAgent("no-such-agent"), 404, "agent_not_found");
  assert.ok(isApiError(e, "agent_not_found"));
  assert.ok(!isApiError(e, "environment_not_found"));
  await rejects(client.listAgents({ limit: 0 }), 400, "invalid_request");
  await rejects(createClient({ baseUrl: url, token: "not-the-token" }).listAgents(), 401, "unauthorized");
  // The raw client types the same error bodies.
  const r = await client.raw.GET("/api/v1/environments/{name}", { params: { path: { name: "no-such-env" } } });
  assert.equal(r.response.status, 404);
  assert.equal(r.error?.code, "environment_not_found");
});

test("exec runs a command and reports its exit, output and stdin", async () => {
  const r = await client.exec(agent, { command: "sh", args: ["-c", "read x; echo out-$x; echo err >&2; exit 3"], stdin: "42\n" });
  assert.equal(r.exit_code, 3);
  assert.equal(r.success, false);
  assert.equal(outputText(r), "out-42\n");
  assert.equal(outputText(r, "stderr"), "err\n");
  assert.equal(r.agent_id, agent);
  const bin = await client.exec(agent, { command: "printf", args: ["\\377\\001"] });
  assert.equal(bin.encoding, "base64");
  assert.deepEqual([...outputBytes(bin)], [0xff, 0x01]);
  await rejects(client.exec("no-such-agent", { command: "true" }), 404, "agent_not_found");
});

test("files: write, read, list and delete, text and bytes", async () => {
  const dir = `sdk-test-${process.pid}`;
  await client.writeFile(agent, `${dir}/hello.txt`, "héllo\n");
  assert.equal(await client.readTextFile(agent, `${dir}/hello.txt`), "héllo\n");
  const all = Uint8Array.from({ length: 256 }, (_, i) => i);
  await client.writeFile(agent, `${dir}/bytes.bin`, all, { mode: "600" });
  assert.deepEqual(await client.readFile(agent, `${dir}/bytes.bin`), all);
  const listing = await client.listFiles(agent, dir);
  const names = listing.entries.map((e) => e.name).sort();
  assert.deepEqual(names, ["bytes.bin", "hello.txt"]);
  const bin = listing.entries.find((e) => e.name === "bytes.bin");
  assert.equal(bin?.type, "file");
  assert.equal(bin?.size, 256);
  assert.equal(bin?.mode, "0600");
  await rejects(client.readFile(agent, `${dir}/missing`), 404, "file_not_found");
  await rejects(client.deleteFile(agent, dir), 409, "directory_not_empty");
  await client.deleteFile(agent, dir, { recursive: true });
  await rejects(client.listFiles(agent, dir), 404, "file_not_found");
});

test("sessions: create, wait, read output, list", async () => {
  const s = await client.createSession(agent, { name: `sdk-${process.pid}`, command: "sh", args: ["-c", "echo session-$((6*7)); exit 5"] });
  assert.equal(s.agent_id, agent);
  assert.equal(s.name, `sdk-${process.pid}`);
  assert.equal(s.type, "background");
  const ended = await client.waitSession(s.session_id, wait);
  assert.equal(ended.state, "exited");
  assert.equal(ended.exit_code, 5);
  const text = await client.sessionOutputText(s.session_id);
  assert.match(text, /session-42/);
  const first = await client.readSessionOutput(s.session_id, { from: 0 });
  assert.equal(first.start, 0);
  assert.equal(first.end, first.data.length);
  assert.equal(first.gap, undefined);
  const atEnd = await client.readSessionOutput(s.session_id, { from: first.end });
  assert.equal(atEnd.data.length, 0);
  assert.equal(atEnd.start, first.end);
  await rejects(client.readSessionOutput(s.session_id, { from: first.end + 1 }), 400, "offset_beyond_end");
  const { sessions } = await client.listSessions({ agent_id: agent });
  assert.ok(sessions.some((x) => x.session_id === s.session_id));
  await rejects(client.getSession("no-such-session"), 404, "session_not_found");
  await rejects(client.createSession(agent, { name: "-bad", command: "true" }), 400, "invalid_request");

  // A live session is killed.
  const live = await client.createSession(agent, { command: "sleep", args: ["600"] });
  await client.killSession(live.session_id);
  const killed = await client.waitSession(live.session_id, wait);
  assert.equal(killed.state, "killed");
});

test("environments on the host runtime: create, get, list, exec, stop, start, delete", async () => {
  const runtimes = await client.listRuntimes();
  assert.ok(runtimes.some((r) => r.runtime === "host" && r.isolation === "host"), JSON.stringify(runtimes));
  const name = `sdk-env-${process.pid}`;
  const created = await client.createEnvironment({ runtime: "host", name });
  try {
    assert.equal(created.name, name);
    assert.equal(created.agent_id, name);
    await rejects(client.createEnvironment({ runtime: "host", name }), 409, "environment_exists");
    const ready = await client.waitEnvironment(name, "ready", wait);
    assert.equal(ready.runtime, "host");
    const { environments } = await client.listEnvironments();
    assert.ok(environments.some((e) => e.name === name));
    const r = await client.exec(name, { command: "sh", args: ["-c", "echo in-$AGENT_RUNTIME"] });
    assert.equal(r.exit_code, 0, r.stderr);
    assert.equal(outputText(r), "in-host\n");
    await client.stopEnvironment(name);
    await client.waitEnvironment(name, "stopped", wait);
    await client.startEnvironment(name);
    await client.waitEnvironment(name, "ready", wait);
  } finally {
    await client.deleteEnvironment(name);
  }
  await rejects(client.getEnvironment(name), 404, "environment_not_found");
  await rejects(client.createEnvironment({ runtime: "no-such-runtime", name }), 400, "unknown_runtime");
});

test("the quickstart example runs", async () => {
  const example = fileURLToPath(new URL("../examples/quickstart.js", import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [example, agent], { env: { ...process.env, AGENTIC_URL: url, AGENTIC_TOKEN: token } });
  assert.match(stdout, new RegExp(`^${agent}\\tready\\thost$`, "m"));
  assert.match(stdout, /uname: exit 0: Linux/);
  assert.match(stdout, /read back: hello from the SDK/);
  assert.match(stdout, /session .* exited \(exit 0\): session says 42/);
  assert.match(stdout, /as expected: 404 agent_not_found/);
});
