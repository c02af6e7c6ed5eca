// What an agent builder writes in TypeScript, type-checked (tsc --noEmit, strict)
// against the installed package by tests/sdk_ts: the declarations say what the code does.

import {
  Airlock,
  ApiError,
  Denied,
  Failed,
  type Proposal,
  RateLimited,
  Rejected,
  type Result,
} from "@airlock/sdk";

const airlock = new Airlock("http://127.0.0.1:8000", { token: "alk_example", retries: 2 });
export const traced = new Airlock("http://127.0.0.1:8000", {
  token: "alk_example",
  traceparent: () => process.env.TRACEPARENT,
});

export async function smokeTest(): Promise<string> {
  const result: Result = await airlock.runScript("print('hi')", { reason: "smoke test" });
  const code: number | null = result.exitCode;
  return `${result.status} ${code} ${result.stdout}`;
}

export const refund = airlock.requiresApproval(
  "billing.refund",
  async ({ customer, amount }: { customer: string; amount: number }) => ({
    refundId: `re_${customer}`,
    amount,
  }),
  { reason: "the customer asked", timeout: 600 },
);

export async function refundOnce(): Promise<number> {
  try {
    const done: { refundId: string; amount: number } = await refund({ customer: "c", amount: 1 });
    return done.amount;
  } catch (error) {
    if (error instanceof Rejected || error instanceof Denied) return error.proposal.id;
    if (error instanceof Failed) return error.result.executionId;
    if (error instanceof RateLimited) return error.retryAfter ?? 0;
    if (error instanceof ApiError) return error.status;
    throw error;
  }
}

export async function decided(): Promise<Proposal> {
  const proposal = await airlock.propose("tool.call", { tool: "x", arguments: {} });
  const waited = await airlock.wait(proposal, { until: "decided", timeout: 60 });
  await airlock.report(waited.executionId ?? 0, { succeeded: true, output: { ok: true } });
  return airlock.withdraw(proposal.id, "not needed");
}
