/**
 * Airlock for agent builders in TypeScript: propose, wait, report, and any function
 * behind approval. The counterpart of the Python SDK (`airlock_sdk`), over the
 * published REST API (`/api/v1/schema/`) with the global `fetch`.
 *
 * ```ts
 * import { Airlock, Rejected } from "@airlock/sdk";
 *
 * const airlock = new Airlock("https://airlock.example.com", { token: "alk_…" });
 * const result = await airlock.runScript("print('hi')", { reason: "smoke test" });
 *
 * const refund = airlock.requiresApproval("billing.refund", async ({ customer, amount }) => {
 *   // runs only once a reviewer (or the policy) approved this very call
 * });
 * ```
 *
 * Owns the client (`client`), how one call is sent and retried (`transport`), the
 * answers' types (`types`) and the errors (`errors`). Imports nothing but Node's own.
 *
 * @packageDocumentation
 */

export {
  Airlock,
  type AirlockOptions,
  type ApprovalOptions,
  jsonable,
  type ProposeOptions,
  type ReportOptions,
  type ScriptOptions,
  type Until,
  type WaitOptions,
} from "./client.js";
export {
  AirlockError,
  ApiError,
  Denied,
  Ended,
  type ErrorBody,
  Expired,
  Failed,
  NotDecided,
  Paused,
  RateLimited,
  Rejected,
  Unavailable,
  Withdrawn,
} from "./errors.js";
export {
  type DecisionData,
  type ExecutionData,
  type Json,
  Proposal,
  type ProposalData,
  Result,
} from "./types.js";
