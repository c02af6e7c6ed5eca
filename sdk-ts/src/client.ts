/**
 * `Airlock`: an agent's calls of the API (propose, wait, withdraw, report, run a
 * script) and any function put behind approval, with the Python SDK's semantics
 * (`airlock_sdk.flows` and `airlock_sdk.client`), awaited.
 *
 * @module
 */

import { randomUUID } from "node:crypto";

import { AirlockError, ended, Failed, NotDecided } from "./errors.js";
import { Transport } from "./transport.js";
import { type ExecutionData, type Json, Proposal, type ProposalData, Result } from "./types.js";

/** Seconds of one long-poll. */
const WAIT_STEP = 30;
/** The states an execution ends in. */
const TERMINAL = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);

/** How a client reaches Airlock. Every duration is in seconds, as in the API. */
export interface AirlockOptions {
  /** The agent's bearer token (`alk_…`). */
  token: string;
  /** Seconds to wait for an answer, on top of a long-poll's own wait. Default 30. */
  timeout?: number;
  /**
   * How many times a call that got no answer (or a 502/503/504) is sent again, when
   * that is safe: every read, and every proposal (its idempotency key makes it the same
   * one). Default 4; 0 never sends again.
   */
  retries?: number;
  /** Seconds before the first of those retries, doubled at each. Default 0.5. */
  backoff?: number;
  /**
   * Seconds one call may spend, in all, waiting out refusals: a proposal answered 429
   * (too many pending, or too fast) is sent again after the server's `Retry-After`,
   * the same proposal with the same idempotency key, until it is made or this is spent
   * (then `RateLimited`; 0: at once). A paused agent (423) is `Paused` at once.
   * Default 300.
   */
  rateLimitWait?: number;
  /** Where each wait for a refusal is told ("too_many_pending: retrying in 12 s"). */
  log?: (message: string) => void;
  /**
   * The W3C `traceparent` sent with each call, or a function that returns the current
   * one (called per call; `undefined` or "" sends none): Airlock's spans of a proposal
   * become that span's children. With `@opentelemetry/api`, for instance:
   * `() => { const h: Record<string, string> = {}; propagation.inject(context.active(), h); return h.traceparent; }`.
   */
  traceparent?: string | (() => string | undefined);
}

/** What a proposal says besides its action and parameters. */
export interface ProposeOptions {
  /** Why, for the reviewers. */
  reason?: string;
  /** `low`, `normal` (the default), `high` or `critical`. */
  urgency?: string;
  /** The key that makes the same proposal sent twice one proposal; one is made if none. */
  idempotencyKey?: string;
}

/** What `wait` waits for: `decided` (the default), or `finished`: its run ended. */
export type Until = "decided" | "finished";

/** How long and for what `wait` waits. */
export interface WaitOptions {
  until?: Until;
  /** Seconds in all. Default 3600. */
  timeout?: number;
}

/** A script run behind approval. */
export interface ScriptOptions {
  /** `python` (the default), `bash` or `javascript`. */
  language?: string;
  reason?: string;
  /** Seconds to wait for its decision and its run. Default 3600. */
  timeout?: number;
}

/** How a tool call the agent carried out went. */
export interface ReportOptions {
  succeeded: boolean;
  /**
   * What it returned or why it failed: text, or any JSON. Default "", and so is `null`
   * (nothing returned): the API refuses a null output.
   */
  output?: unknown;
}

/** How a function behind approval is proposed. */
export interface ApprovalOptions<A extends unknown[]> {
  /** Why, for the reviewers. Default "". */
  reason?: string;
  /** Seconds to wait for the decision. Default 3600. */
  timeout?: number;
  /**
   * The call's arguments by name, as the reviewers see them. By default a call with one
   * plain object is that object (the usual named arguments), one with none is `{}`, and
   * any other is `{"args": [...]}`.
   */
  arguments?: (...args: A) => Record<string, unknown>;
}

/**
 * Airlock's API for an agent (its token), one awaited call at a time.
 *
 * ```ts
 * const airlock = new Airlock("https://airlock.example.com", { token: "alk_…" });
 * const result = await airlock.runScript("print('hi')", { reason: "smoke test" });
 * ```
 */
export class Airlock {
  /** The server's address, without a trailing slash. */
  readonly url: string;
  private readonly transport: Transport;

  constructor(url: string, options: AirlockOptions) {
    this.url = url.replace(/\/+$/, "");
    this.transport = new Transport(this.url, {
      token: options.token,
      timeout: options.timeout ?? 30,
      retries: options.retries ?? 4,
      backoff: options.backoff ?? 0.5,
      rateLimitWait: options.rateLimitWait ?? 300,
      log: options.log ?? ((message) => console.warn(`airlock: ${message}`)),
      traceparent: options.traceparent,
    });
  }

  /**
   * Propose an action; the proposal as the policy left it (`status` says).
   *
   * It always carries an idempotency key (`options.idempotencyKey`, or a new one), so a
   * proposal whose answer was lost is sent again and found, not made twice. Refused for
   * now (429), it is sent again after the server's `Retry-After` for up to
   * `rateLimitWait` seconds in all, then `RateLimited`; `Paused` (423) at once.
   */
  async propose(
    action: string,
    parameters: Record<string, unknown>,
    options: ProposeOptions = {},
  ): Promise<Proposal> {
    const body = {
      action,
      parameters,
      reason: options.reason ?? "",
      urgency: options.urgency ?? "normal",
      idempotency_key: options.idempotencyKey ?? `sdk-${randomUUID().replaceAll("-", "")}`,
    };
    const data = await this.transport.send<ProposalData>({
      method: "POST",
      path: "proposals",
      body,
      retry: true,
    });
    return new Proposal(data);
  }

  /**
   * The proposal once decided, or (`until: "finished"`) once its run ended (decided but
   * still running when `timeout` ran out: as it stands). `Denied`, `Rejected`,
   * `Expired` or `Withdrawn` if it will not run, `NotDecided` if still pending after
   * `timeout` seconds.
   */
  async wait(proposal: Proposal | number, options: WaitOptions = {}): Promise<Proposal> {
    const until = options.until ?? "decided";
    const timeout = options.timeout ?? 3600;
    const id = typeof proposal === "number" ? proposal : proposal.id;
    const deadline = performance.now() + timeout * 1000;
    let current = typeof proposal === "number" ? null : proposal;
    while (current === null || !reached(current, until)) {
      const left = (deadline - performance.now()) / 1000;
      if (current !== null && left <= 0) {
        if (current.status === "pending") throw new NotDecided(current, timeout);
        return current; // decided, its run not ended in time: the caller reads its state
      }
      const step = current === null ? 0 : Math.min(WAIT_STEP, Math.max(Math.floor(left), 1));
      const data = await this.transport.send<ProposalData>({
        method: "GET",
        path: `proposals/${id}`,
        params: step ? { wait: step, until } : {},
        wait: step,
      });
      current = new Proposal(data);
      throwIfEnded(current);
    }
    return current;
  }

  /**
   * Take back a pending proposal of this agent (one nobody needs any more): it is
   * `withdrawn`, a final state, and nothing runs; `reason` (up to 500 characters) is
   * kept for reviewers and the audit trail. `ApiError` 409 `conflict` once it was
   * decided, 404 `not_found` for a proposal not this agent's. Sent once (a second try
   * would find it withdrawn already).
   */
  async withdraw(proposal: Proposal | number, reason = ""): Promise<Proposal> {
    const id = typeof proposal === "number" ? proposal : proposal.id;
    const data = await this.transport.send<ProposalData>({
      method: "POST",
      path: `proposals/${id}/withdraw`,
      body: { reason },
    });
    return new Proposal(data);
  }

  /** An execution's result as it stands. */
  async result(executionId: number): Promise<Result> {
    const data = await this.transport.send<ExecutionData>({
      method: "GET",
      path: `executions/${executionId}`,
    });
    return new Result(data);
  }

  /**
   * Run a script behind approval: propose it, wait for its decision and its run; its
   * result, or `Failed` with it (and `Denied`, `Rejected`, … if it never ran).
   */
  async runScript(code: string, options: ScriptOptions = {}): Promise<Result> {
    const proposal = await this.propose(
      "script.execute",
      { language: options.language ?? "python", code },
      { reason: options.reason ?? "" },
    );
    const finished = await this.wait(proposal, { until: "finished", timeout: options.timeout });
    const inline = finished.raw.result; // the answer to until=finished carries it
    const ran =
      inline !== undefined && !inline.output_truncated
        ? new Result(inline)
        : await this.result(executionOf(finished));
    if (!ran.succeeded) throw new Failed(ran);
    return ran;
  }

  /**
   * Report how a tool call the agent carried out went (once, before its deadline): the
   * output becomes the execution's stdout (text as it is, JSON serialized).
   */
  async report(executionId: number, options: ReportOptions): Promise<Result> {
    const body = {
      status: options.succeeded ? "succeeded" : "failed",
      output: jsonable(options.output ?? ""),
    };
    const data = await this.transport.send<ExecutionData>({
      method: "POST",
      path: `executions/${executionId}/report`,
      body,
    });
    return new Result(data);
  }

  /**
   * `fn` behind approval: each call is first a `tool.call` of `tool` with the call's
   * arguments, and `fn` runs only once that very call is approved; its return value
   * (or its error, as "Name: message") is reported, and returned (or thrown).
   * `Denied`, `Rejected`, `Expired`, `Withdrawn`, `NotDecided` (or `Paused`,
   * `RateLimited`) instead of running.
   *
   * ```ts
   * const refund = airlock.requiresApproval("billing.refund", async ({ customer, amount }) => {
   *   return { refundId: "re_123", amount };
   * });
   * await refund({ customer: "cus_42", amount: 30.5 });
   * ```
   */
  requiresApproval<A extends unknown[], R>(
    tool: string,
    fn: (...args: A) => R,
    options: ApprovalOptions<A> = {},
  ): (...args: A) => Promise<Awaited<R>> {
    const airlock = this;
    const named = options.arguments ?? argumentsOf;
    return async function (this: unknown, ...args: A): Promise<Awaited<R>> {
      const approved = await airlock.toolCall(tool, named(...args), options);
      const executionId = executionOf(approved);
      let value: Awaited<R>;
      try {
        value = await fn.apply(this, args);
      } catch (error) {
        await airlock.report(executionId, { succeeded: false, output: String(error) });
        throw error;
      }
      await airlock.report(executionId, { succeeded: true, output: value });
      return value;
    };
  }

  /** A tool call proposed and decided: the approved proposal (its run awaits the report). */
  private async toolCall(
    tool: string,
    args: Record<string, unknown>,
    options: { reason?: string; timeout?: number },
  ): Promise<Proposal> {
    const proposal = await this.propose(
      "tool.call",
      { tool, arguments: jsonable(args) },
      { reason: options.reason ?? "" },
    );
    return this.wait(proposal, { until: "decided", timeout: options.timeout });
  }
}

/** Whether `proposal` is where `until` waits for it to be; throws if it will not run. */
function reached(proposal: Proposal, until: Until): boolean {
  throwIfEnded(proposal);
  if (proposal.status === "pending") return false;
  return until === "decided" || TERMINAL.has(proposal.executionStatus ?? "");
}

/** Throws `Denied`, `Rejected`, `Expired` or `Withdrawn` for a proposal that will not run. */
function throwIfEnded(proposal: Proposal): void {
  const error = ended(proposal);
  if (error !== null) throw error;
}

/** The execution of an approved proposal (every approved proposal has one). */
function executionOf(proposal: Proposal): number {
  if (proposal.executionId === null) {
    throw new AirlockError(`proposal #${proposal.id} is ${proposal.status} with no execution`);
  }
  return proposal.executionId;
}

/** A call's arguments by name: see `ApprovalOptions.arguments`. */
function argumentsOf(...args: unknown[]): Record<string, unknown> {
  if (args.length === 0) return {};
  const [first] = args;
  if (args.length === 1 && isPlainObject(first)) return first;
  return { args };
}

/** Whether `value` is an object literal (not an array, a Date, a class's instance). */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

/**
 * `value` as JSON has it: what JSON cannot hold becomes text (a bigint, a function),
 * a Map an object, a Set a list; nothing (`undefined`) is `null`.
 */
export function jsonable(value: unknown): Json {
  const text = JSON.stringify(value, (_key, item: unknown) => {
    if (typeof item === "bigint" || typeof item === "function" || typeof item === "symbol") {
      return String(item);
    }
    if (item instanceof Map) return Object.fromEntries(item);
    if (item instanceof Set) return [...item];
    return item;
  });
  return text === undefined ? null : (JSON.parse(text) as Json);
}
