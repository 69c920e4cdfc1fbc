// Quickstart: list the agents, run a command, write and read a file, and
// run a session and print its output.
//
//   AGENTIC_URL=http://127.0.0.1:8122 AGENTIC_TOKEN=$(cat ../../.state/operator-token) \
//     node build/examples/quickstart.js host-01
import { createClient, isApiError, outputText } from "@agentic-sandbox/client";

const client = createClient({
  baseUrl: process.env.AGENTIC_URL ?? "http://127.0.0.1:8122",
  token: process.env.AGENTIC_TOKEN,
});
const agent = process.argv[2] ?? "host-01";

const { agents } = await client.listAgents();
for (const a of agents) console.log(`${a.id}\t${a.status}\t${a.runtime}`);

const r = await client.exec(agent, { command: "uname", args: ["-s"] });
console.log(`uname: exit ${r.exit_code}: ${outputText(r).trim()}`);

await client.writeFile(agent, "quickstart/hello.txt", "hello from the SDK\n");
console.log(`read back: ${(await client.readTextFile(agent, "quickstart/hello.txt")).trim()}`);

const s = await client.createSession(agent, { command: "sh", args: ["-c", "echo session says $((6*7))"] });
const ended = await client.waitSession(s.session_id, { timeoutMs: 60_000 });
console.log(`session ${ended.name} ${ended.state} (exit ${ended.exit_code}): ${(await client.sessionOutputText(s.session_id)).trim()}`);

try {
  await client.getAgent("no-such-agent");
} catch (e) {
  if (!isApiError(e, "agent_not_found")) throw e;
  console.log(`as expected: ${e.status} ${e.code}: ${e.error}`);
}
