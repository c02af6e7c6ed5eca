// Proposals made, waited on, withdrawn and refused: idempotency keys, long-polls that
// run out, withdrawal, and the API's refusals as errors with their type.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Airlock, ApiError, NotDecided, Proposal, Withdrawn } from "@airlock/sdk";

import { agent, api, outcome, run, url } from "./live.mjs";

test("the same idempotency key makes one proposal", async () => {
  const airlock = agent();
  const key = `ts-${run}`;
  const first = await airlock.propose(
    "tool.call",
    { tool: `billing.once_${run}`, arguments: {} },
    { reason: "once", idempotencyKey: key },
  );
  const again = await airlock.propose(
    "tool.call",
    { tool: `billing.once_${run}`, arguments: {} },
    { reason: "once", idempotencyKey: key },
  );
  assert.ok(first instanceof Proposal);
  assert.equal(again.id, first.id);
  assert.equal(first.raw.idempotency_key, key);
  assert.equal(first.status, "pending");
  assert.ok(first.risk >= 0 && first.reasons.length > 0);
  const made = await airlock.propose("tool.call", { tool: `billing.keyed_${run}`, arguments: {} });
  assert.match(made.raw.idempotency_key, /^sdk-[0-9a-f]{32}$/);
});

test("nobody deciding in time is NotDecided", async () => {
  const airlock = agent();
  const proposal = await airlock.propose("tool.call", {
    tool: `billing.audit_${run}`,
    arguments: {},
  });
  const started = performance.now();
  await assert.rejects(airlock.wait(proposal, { timeout: 1 }), (error) => {
    assert.ok(error instanceof NotDecided);
    assert.equal(error.proposal.status, "pending");
    return true;
  });
  assert.ok(performance.now() - started < 10_000);
});

test("a withdrawn proposal ends the wait on it and cannot be withdrawn twice", async () => {
  const airlock = agent();
  const proposal = await airlock.propose("tool.call", {
    tool: `billing.migrate_${run}`,
    arguments: {},
  });
  const waiting = outcome(agent().wait(proposal.id, { until: "finished", timeout: 60 }));
  await new Promise((resolve) => setTimeout(resolve, 500)); // the long-poll is under way
  const started = performance.now();
  const withdrawn = await airlock.withdraw(proposal, "the migration is not needed");
  assert.equal(withdrawn.status, "withdrawn");
  assert.equal(withdrawn.reason, "the migration is not needed");
  const { error: ended } = await waiting;
  assert.ok(performance.now() - started < 10_000); // the long-poll ended on it
  assert.ok(ended instanceof Withdrawn);
  assert.equal(ended.message, `proposal #${proposal.id} withdrawn: the migration is not needed`);
  const { body } = await api("GET", `/api/v1/proposals/${proposal.id}`);
  assert.equal(body.status, "withdrawn");
  await assert.rejects(airlock.wait(proposal.id), { name: "Withdrawn" });
  await assert.rejects(airlock.withdraw(proposal.id), {
    name: "ApiError",
    status: 409,
    type: "conflict",
  });
});

test("the API's refusals are ApiErrors with their type", async () => {
  const refused = await agent()
    .propose("tool.call", { tool: "billing.x", arguments: [1] })
    .then(
      () => assert.fail("it was made"),
      (error) => error,
    );
  assert.ok(refused instanceof ApiError);
  assert.equal(refused.name, "ApiError");
  assert.equal(refused.status, 400);
  assert.equal(refused.type, "validation_error");
  assert.match(refused.message, /arguments: must be a JSON object/);
  assert.equal(refused.body.type, "validation_error");
  assert.match(String(refused), /^ApiError: 400 validation_error: /);

  const wrong = new Airlock(url, { token: "alk_wrong" });
  await assert.rejects(wrong.runScript("print(1)"), { name: "ApiError", status: 401 });
  const reviewer = new Airlock(url, { token: process.env.AIRLOCK_REVIEWER_TOKEN });
  await assert.rejects(reviewer.withdraw(1), { status: 404, type: "not_found" });
});
