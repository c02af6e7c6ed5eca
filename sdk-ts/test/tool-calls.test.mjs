// Functions behind approval: each call a tool.call, run only once a reviewer approved it
// (over REST, with the reviewer's token), its outcome reported; every way it ends.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Denied, Rejected } from "@airlock/sdk";

import { agent, callsOf, decideWhenPending, outcome, run } from "./live.mjs";

test("an approved call runs and its return value is reported", async () => {
  const airlock = agent();
  const tool = `billing.refund_${run}`;
  const refunds = [];
  const refund = airlock.requiresApproval(
    tool,
    async ({ customer, amount }) => {
      refunds.push([customer, amount]);
      return { refundId: "re_123", amount };
    },
    { reason: "the customer asked" },
  );
  const calling = outcome(refund({ customer: "cus_42", amount: 30.5, currency: "EUR" }));
  const approved = await decideWhenPending(tool, "approve", "ok");
  assert.equal(approved.status, "approved");
  assert.deepEqual(await calling, { value: { refundId: "re_123", amount: 30.5 } });
  assert.deepEqual(refunds, [["cus_42", 30.5]]);

  const [proposal] = await callsOf(tool);
  assert.deepEqual(proposal.parameters.arguments, {
    customer: "cus_42",
    amount: 30.5,
    currency: "EUR",
  });
  assert.equal(proposal.reason, "the customer asked");
  assert.equal(proposal.execution_status, "succeeded");
  const execution = await airlock.result(proposal.execution_id);
  assert.equal(execution.status, "succeeded");
  assert.equal(execution.raw.backend, "agent");
  assert.deepEqual(JSON.parse(execution.stdout), { refundId: "re_123", amount: 30.5 });
});

test("positional arguments are proposed as args, and nothing returned is reported as such", async () => {
  const tool = `billing.ping_${run}`;
  const ping = agent().requiresApproval(tool, (host, times) => {
    assert.deepEqual([host, times], ["db-1", 2]);
  });
  const calling = outcome(ping("db-1", 2));
  await decideWhenPending(tool, "approve");
  assert.deepEqual(await calling, { value: undefined });
  const [proposal] = await callsOf(tool);
  assert.deepEqual(proposal.parameters.arguments, { args: ["db-1", 2] });
  const execution = await agent().result(proposal.execution_id);
  assert.deepEqual([execution.status, execution.stdout], ["succeeded", ""]);
});

test("an error of the function is reported and thrown", async () => {
  const tool = `billing.charge_${run}`;
  const charge = agent().requiresApproval(tool, async () => {
    throw new RangeError("card declined");
  });
  const calling = outcome(charge({ amount: 5 }));
  await decideWhenPending(tool, "approve");
  const { error } = await calling;
  assert.ok(error instanceof RangeError);
  assert.equal(error.message, "card declined");
  const [proposal] = await callsOf(tool);
  const execution = await agent().result(proposal.execution_id);
  assert.deepEqual([execution.status, execution.stdout], ["failed", "RangeError: card declined"]);
});

test("a rejected call never runs and says why", async () => {
  const tool = `billing.close_account_${run}`;
  const ran = [];
  const close = agent().requiresApproval(tool, (customer) => ran.push(customer));
  const calling = outcome(close("cus_7"));
  await decideWhenPending(tool, "reject", "not this one");
  const { error: rejected } = await calling;
  assert.ok(rejected instanceof Rejected);
  assert.equal(rejected.name, "Rejected");
  assert.equal(rejected.reason, "reviewer: not this one");
  assert.equal(rejected.proposal.status, "rejected");
  assert.deepEqual(ran, []);
});

test("a call outside the agent's tools is denied at once", async () => {
  const send = agent().requiresApproval("mail.send", () => assert.fail("it ran"));
  const denied = await send({ to: "someone@example.org" }).then(
    () => assert.fail("it was not denied"),
    (error) => error,
  );
  assert.ok(denied instanceof Denied);
  assert.equal(denied.name, "Denied");
  assert.match(denied.reason, /no capability for tool\.call/);
});
