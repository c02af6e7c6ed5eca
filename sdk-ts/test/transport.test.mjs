// How calls are sent again: a proposal whose answer was lost is made once, a 503's and
// a 429's Retry-After are waited out, a paused agent is never retried, a server
// nobody answers for is Unavailable, and a traceparent given goes with each call.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Paused, RateLimited, Unavailable } from "@airlock/sdk";

import { agentAt, callsOf, closedPort, front, run } from "./live.mjs";

const PROPOSALS = "POST /api/v1/proposals";

test("a proposal whose answer was lost is asked again and made once", async () => {
  const between = await front((request, n) =>
    request.method === "POST" && n < 2 ? "drop" : undefined,
  );
  const tool = `billing.lost_${run}`;
  try {
    const proposal = await agentAt(between.url, { backoff: 0.05 }).propose("tool.call", {
      tool,
      arguments: {},
    });
    assert.deepEqual(between.seen, [PROPOSALS, PROPOSALS, PROPOSALS]); // two answers lost
    const made = (await callsOf(tool)).map((p) => p.id);
    assert.deepEqual(made, [proposal.id]); // made once: the key found it again
  } finally {
    await between.close();
  }
});

test("a 503's Retry-After is waited out", async () => {
  const busy = { status: 503, headers: { "Retry-After": "1" }, body: {} };
  const between = await front((_request, n) => (n === 0 ? busy : undefined));
  try {
    const started = performance.now();
    const result = await agentAt(between.url).runScript("print('after')");
    assert.equal(result.stdout, "after\n");
    assert.ok(performance.now() - started >= 950);
  } finally {
    await between.close();
  }
});

test("a 429 is waited out with the same proposal, or RateLimited when it may not wait", async () => {
  const full = {
    status: 429,
    headers: { "Retry-After": "1" },
    body: { error: { type: "too_many_pending", message: "max_pending 1 proposals wait" } },
  };
  const between = await front((_request, n) => (n === 0 || n === 2 ? full : undefined));
  try {
    const said = [];
    const started = performance.now();
    const proposal = await agentAt(between.url, { log: (message) => said.push(message) }).propose(
      "tool.call",
      { tool: `billing.queued_${run}`, arguments: {} },
      { idempotencyKey: `q-${run}` },
    );
    assert.ok(performance.now() - started >= 950);
    assert.equal(proposal.raw.idempotency_key, `q-${run}`);
    assert.deepEqual(said, ["too_many_pending: retrying in 1 s"]);

    const hasty = agentAt(between.url, { rateLimitWait: 0 });
    const refused = await hasty
      .propose("tool.call", { tool: `billing.hasty_${run}`, arguments: {} })
      .then(
        () => assert.fail("it was made"),
        (error) => error,
      );
    assert.ok(refused instanceof RateLimited);
    assert.deepEqual(
      [refused.status, refused.type, refused.retryAfter],
      [429, "too_many_pending", 1],
    );
  } finally {
    await between.close();
  }
});

test("a paused agent is refused at once and never retried", async () => {
  const paused = {
    status: 423,
    body: { error: { type: "agent_paused", message: "runaway loop: an admin must resume it" } },
  };
  const between = await front(() => paused);
  try {
    await assert.rejects(
      agentAt(between.url).propose("tool.call", { tool: "billing.again", arguments: {} }),
      (error) => error instanceof Paused && error.name === "Paused" && error.status === 423,
    );
    assert.deepEqual(between.seen, [PROPOSALS]);
  } finally {
    await between.close();
  }
});

test("a server nobody answers for is Unavailable", async () => {
  const down = agentAt(await closedPort(), { retries: 1, backoff: 0.05 });
  await assert.rejects(down.result(1), (error) => {
    assert.ok(error instanceof Unavailable);
    assert.equal(error.name, "Unavailable");
    assert.match(error.message, /^cannot reach http:\/\/127\.0\.0\.1:\d+: fetch failed/);
    return true;
  });
});

test("a traceparent, given or returned by a function, goes with each call", async () => {
  const between = await front();
  const given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  try {
    const call = (options) =>
      agentAt(between.url, options).propose("tool.call", {
        tool: `billing.traced_${run}`,
        arguments: {},
      });
    await call({ traceparent: given });
    await call({ traceparent: () => given });
    await call({ traceparent: () => undefined });
    await call({});
    assert.deepEqual(between.traceparents, [given, given, undefined, undefined]);
  } finally {
    await between.close();
  }
});
