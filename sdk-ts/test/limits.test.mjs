// The server's own refusals, not a front's (transport.test.mjs shows them waited out):
// an agent at its max_pending gets RateLimited (429 too_many_pending, Retry-After) and
// writes nothing until a place is free; a paused agent gets Paused (423) at once.
// tests/sdk_ts/test_typescript_sdk.py makes the two agents: AIRLOCK_LIMITED_TOKEN's may
// keep one proposal waiting, AIRLOCK_PAUSED_TOKEN's is paused by an admin.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Airlock, Paused, RateLimited } from "@airlock/sdk";

import { api, run, url } from "./live.mjs";

const limited = (options = {}) =>
  new Airlock(url, { token: process.env.AIRLOCK_LIMITED_TOKEN, log: () => {}, ...options });
const call = (tool) => ["tool.call", { tool: `billing.${tool}_${run}`, arguments: {} }];

test("past max_pending the server's 429 is RateLimited and writes nothing", async () => {
  const first = await limited().propose(...call("first"));
  assert.equal(first.status, "pending");

  const hasty = await limited({ rateLimitWait: 0 })
    .propose(...call("hasty"))
    .then(
      () => assert.fail("a second one was made"),
      (error) => error,
    );
  assert.ok(hasty instanceof RateLimited && hasty.name === "RateLimited");
  assert.equal(hasty.status, 429);
  assert.equal(hasty.type, "too_many_pending");
  assert.ok(hasty.retryAfter >= 1 && hasty.retryAfter <= 60, `Retry-After ${hasty.retryAfter}`);

  await limited().withdraw(first.id, "a place for the next one");
  await new Promise((resolve) => setTimeout(resolve, 600)); // another process's memory of it
  const second = await limited({ rateLimitWait: 0 }).propose(...call("second"));
  assert.equal(second.status, "pending");
  const { body } = await api("GET", `/api/v1/proposals?action=tool.call&limit=200`);
  const made = body.items.filter((p) => p.parameters.tool.endsWith(`_${run}`));
  assert.deepEqual(made.map((p) => p.parameters.tool).sort(), [
    `billing.first_${run}`,
    `billing.second_${run}`,
  ]); // the refused one wrote nothing
});

test("a paused agent's proposal is refused at once with the admin's reason", async () => {
  const paused = new Airlock(url, { token: process.env.AIRLOCK_PAUSED_TOKEN, log: () => {} });
  const started = performance.now();
  await assert.rejects(paused.propose(...call("paused")), (error) => {
    assert.ok(error instanceof Paused && error.name === "Paused");
    assert.equal(error.status, 423);
    assert.match(error.message, /incident 7/);
    return true;
  });
  assert.ok(performance.now() - started < 5000, "it was retried");
});
