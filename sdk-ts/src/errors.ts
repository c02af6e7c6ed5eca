/**
 * Every way a call ends other than as asked, one error class each, with its reason:
 * the same classes, with the same meaning, as the Python SDK's `airlock_sdk.errors`.
 *
 * Each class's `name` is its own (`Rejected`, `Denied`, …), so a caught error reads
 * the same in a log as in an `instanceof` test.
 *
 * @module
 */

import type { Proposal, Result } from "./types.js";

/** Anything this package throws. */
export class AirlockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Airlock did not answer (down, unreachable, too slow) or answered 5xx. */
export class Unavailable extends AirlockError {}

/** The `{"error": {"type", "message"}}` body the API answers a refusal with. */
export interface ErrorBody {
  type: string;
  message: string;
  [key: string]: unknown;
}

/**
 * The API refused the call: `status` (400, 401, 403, 404, 409, 423, 429), `type` and
 * `message` as its error body says; `body` is that body's `error` as it came.
 */
export class ApiError extends AirlockError {
  readonly status: number;
  readonly type: string;
  readonly body: ErrorBody;

  constructor(status: number, body: ErrorBody) {
    super(body.message);
    this.status = status;
    this.type = body.type;
    this.body = body;
  }

  /** `ApiError: 400 validation_error: …`, as the Python SDK prints it. */
  override toString(): string {
    return `${this.name}: ${this.status} ${this.type}: ${this.message}`;
  }
}

/**
 * 423 `agent_paused`: an admin paused this agent (or its rejections in a row did).
 * Every proposal is refused until an admin resumes it, so it is never sent again.
 */
export class Paused extends ApiError {}

/**
 * 429, still refused when the client's `rateLimitWait` was spent: `type`
 * `too_many_pending` (the agent's `max_pending` proposals wait for review) or
 * `rate_limited` (past its `max_proposals_per_minute`); `retryAfter`: the seconds the
 * server last asked for (`null` if it named none).
 */
export class RateLimited extends ApiError {
  readonly retryAfter: number | null;

  constructor(status: number, body: ErrorBody, retryAfter: number | null) {
    super(status, body);
    this.retryAfter = retryAfter;
  }
}

/** A proposal that will not run: `proposal`, and the `reason` it ended so. */
export class Ended extends AirlockError {
  readonly proposal: Proposal;
  readonly reason: string;

  constructor(proposal: Proposal) {
    super(`proposal #${proposal.id} ${proposal.status}: ${proposal.reason}`);
    this.proposal = proposal;
    this.reason = proposal.reason;
  }
}

/** The policy denied it (deny list, no capability). */
export class Denied extends Ended {}

/** A reviewer rejected it. */
export class Rejected extends Ended {}

/** Nobody decided before it expired. */
export class Expired extends Ended {}

/**
 * The agent withdrew it before a decision (`withdraw`, here or in another process);
 * `reason` is the one it gave.
 */
export class Withdrawn extends Ended {}

/** Still pending when the caller's `timeout` ran out; `proposal` as it stood. */
export class NotDecided extends AirlockError {
  readonly proposal: Proposal;

  constructor(proposal: Proposal, timeout: number) {
    super(`proposal #${proposal.id} was not decided in ${timeout} s`);
    this.proposal = proposal;
  }
}

/** It ran and did not succeed: `result` (exit code, output) and the `reason`. */
export class Failed extends AirlockError {
  readonly result: Result;
  readonly reason: string;

  constructor(result: Result) {
    const reason = Failed.reasonOf(result);
    super(`execution #${result.executionId} ${result.status}: ${reason}`);
    this.result = result;
    this.reason = reason;
  }

  private static reasonOf(result: Result): string {
    if (result.status === "queued" || result.status === "running") {
      return `still ${result.status} when the wait ended`;
    }
    if (result.error) return result.error;
    return result.exitCode !== null ? `exit code ${result.exitCode}` : result.status;
  }
}

/** The error a proposal that will not run is thrown as (by its final state), or `null`. */
export function ended(proposal: Proposal): Ended | null {
  switch (proposal.status) {
    case "denied":
      return new Denied(proposal);
    case "rejected":
      return new Rejected(proposal);
    case "expired":
      return new Expired(proposal);
    case "withdrawn":
      return new Withdrawn(proposal);
    default:
      return null;
  }
}
