// Scripts run behind the policy (the demo policy approves a small script at once):
// their result, and Failed with it when they do not succeed.

import assert from "node:assert/strict";
import { test } from "node:test";

import { AirlockError, Failed, Result } from "@airlock/sdk";

import { agent } from "./live.mjs";

test("a script runs behind the policy and answers its result", async () => {
  const result = await agent().runScript("print('hi')", { reason: "smoke test" });
  assert.ok(result instanceof Result);
  assert.equal(result.status, "succeeded");
  assert.equal(result.exitCode, 0);
  assert.equal(result.stdout, "hi\n");
  assert.equal(result.stderr, "");
  assert.equal(result.succeeded, true);
  assert.equal(typeof result.executionId, "number");
  assert.equal(result.raw.backend, "local");
});

test("a failing script is Failed, with its result and the reason", async () => {
  const code = "import sys\nprint('no', file=sys.stderr)\nsys.exit(3)";
  const failed = await agent()
    .runScript(code, { language: "python" })
    .then(
      () => assert.fail("it did not fail"),
      (error) => error,
    );
  assert.ok(failed instanceof Failed && failed instanceof AirlockError);
  assert.equal(failed.name, "Failed");
  assert.equal(failed.result.status, "failed");
  assert.equal(failed.result.exitCode, 3);
  assert.equal(failed.result.stderr, "no\n");
  assert.equal(failed.reason, "exit code 3");
  assert.equal(failed.message, `execution #${failed.result.executionId} failed: exit code 3`);
});

test("a bash script runs too", async () => {
  const result = await agent().runScript('echo "$((6 * 7))"', { language: "bash" });
  assert.equal(result.stdout, "42\n");
});
