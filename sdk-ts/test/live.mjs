// The live Airlock the tests run against, as AIRLOCK_URL, AIRLOCK_AGENT_TOKEN (an agent
// with script.execute and tool.call:billing.*) and AIRLOCK_REVIEWER_TOKEN (a reviewer's
// personal token) name it; tests/sdk_ts/test_typescript_sdk.py starts one and sets them.
// Also: a reviewer who decides over REST, and a front that loses or replaces answers.

import { createServer } from "node:http";

import { Airlock } from "@airlock/sdk";

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: these tests run against a live Airlock`);
  return value;
}

export const url = required("AIRLOCK_URL").replace(/\/+$/, "");
export const agentToken = required("AIRLOCK_AGENT_TOKEN");
export const reviewerToken = required("AIRLOCK_REVIEWER_TOKEN");

/** A suffix that keeps this run's tool names apart from an earlier run's. */
export const run = `${process.pid}_${Date.now().toString(36)}`;

/** The agent's client; `options` on top (quiet unless a test listens). */
export function agent(options = {}) {
  return agentAt(url, options);
}

/** The agent's client of the server at `address` (a front, a closed port). */
export function agentAt(address, options = {}) {
  return new Airlock(address, { token: agentToken, log: () => {}, ...options });
}

/** { status, body } of an API call, made as the reviewer (or `token`). */
export async function api(method, path, body, token = reviewerToken) {
  const response = await fetch(url + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

/**
 * What `promise` comes to, `{ value }` or `{ error }`, caught at once: a call left
 * running while a test decides it must not reject unhandled meanwhile.
 */
export function outcome(promise) {
  return promise.then(
    (value) => ({ value }),
    (error) => ({ error }),
  );
}

/** The agent's proposals of `tool.call` for `tool`, newest first, as the reviewer sees them. */
export async function callsOf(tool) {
  const { body } = await api("GET", "/api/v1/proposals?action=tool.call&limit=200");
  return body.items.filter((p) => p.parameters.tool === tool);
}

/**
 * A reviewer who decides (`approve` or `reject`) the first pending call of `tool` once it
 * shows, as a reviewer's script does: `POST /api/v1/proposals/{id}/{kind}` with a comment.
 * Resolves to the decided proposal.
 */
export async function decideWhenPending(tool, kind, comment = "") {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const { body } = await api("GET", "/api/v1/proposals?status=pending&action=tool.call");
    const mine = body.items.find((p) => p.parameters.tool === tool);
    if (mine) {
      const decided = await api("POST", `/api/v1/proposals/${mine.id}/${kind}`, { comment });
      if (decided.status !== 200) throw new Error(`${kind}: ${JSON.stringify(decided.body)}`);
      return decided.body;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`no pending call of ${tool} to ${kind}`);
}

/**
 * A front in front of the server, as a proxy between is: each request goes through to
 * it unless `plan(request, n)` (n: the request's number, from 0) says otherwise:
 * "drop" sends it on but throws the answer away and closes the connection (a proxy
 * whose backend died after the work was done), an object `{ status, headers, body }`
 * is answered instead of the server. `seen` lists "METHOD /path" of every request,
 * `traceparents` the `traceparent` header each carried (undefined: none).
 */
export async function front(plan = () => undefined) {
  const seen = [];
  const traceparents = [];
  const server = createServer(async (request, response) => {
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    const n = seen.push(`${request.method} ${request.url.split("?")[0]}`) - 1;
    traceparents.push(request.headers.traceparent);
    const step = plan(request, n);
    if (step && step !== "drop") {
      response.writeHead(step.status, { "Content-Type": "application/json", ...step.headers });
      response.end(JSON.stringify(step.body ?? {}));
      return;
    }
    const answer = await fetch(url + request.url, {
      method: request.method,
      headers: { Authorization: request.headers.authorization, "Content-Type": "application/json" },
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    const payload = Buffer.from(await answer.arrayBuffer());
    if (step === "drop") {
      request.socket.destroy(); // nothing sent back
      return;
    }
    response.writeHead(answer.status, { "Content-Type": "application/json" });
    response.end(payload);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    traceparents,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The address of a port nothing listens on (just closed). */
export async function closedPort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}
