/**
 * One API call over the global `fetch`, sent again when that is safe, and its answer
 * read into JSON or one of the errors of `errors.ts`.
 *
 * The rules are the Python SDK's (`airlock_sdk.client`): a call that got no answer,
 * or a 502/503/504 (a proxy between, a web process restarting, the database away), is
 * sent again after pauses doubling from `backoff` (a `Retry-After` up to
 * `MAX_PAUSE` wins), `retries` times, when that is safe: a read, or a proposal,
 * which the server recognises by its idempotency key. A 429 (too many pending, or too
 * fast) is sent again after the server's `Retry-After` for up to `rateLimitWait`
 * seconds in all; a 423 (paused) never is.
 *
 * @module
 */

import { ApiError, type ErrorBody, Paused, RateLimited, Unavailable } from "./errors.js";

/** The longest `Retry-After`, in seconds, waited out on a 502/503/504. */
export const MAX_PAUSE = 10;
const RETRIED_STATUSES = new Set([502, 503, 504]);
const USER_AGENT = "airlock-sdk-ts/0.1";

/** One request to the API. */
export interface Call {
  method: "GET" | "POST";
  /** The path under `/api/v1/`. */
  path: string;
  params?: Record<string, string | number>;
  body?: unknown;
  /** Seconds the server may hold it (a long-poll), on top of the client's timeout. */
  wait?: number;
  /**
   * Safe to send again when no answer came although it writes: the server recognises
   * it as the same one (a proposal's idempotency key). Reads always are.
   */
  retry?: boolean;
}

/** How a `Transport` sends: see `AirlockOptions` for each. */
export interface TransportSettings {
  token: string;
  timeout: number;
  retries: number;
  backoff: number;
  rateLimitWait: number;
  log: (message: string) => void;
  traceparent?: string | (() => string | undefined);
}

/** An HTTP answer, read whole. */
interface Answer {
  url: string;
  status: number;
  headers: Headers;
  text: string;
}

/** Sends calls to one Airlock with one token, and reads their answers. */
export class Transport {
  constructor(
    readonly url: string,
    private readonly settings: TransportSettings,
  ) {}

  /** The answer's JSON; `Unavailable` or an `ApiError` when there is none. */
  async send<T>(call: Call): Promise<T> {
    let failed = 0; // tries that got no answer, or a 5xx
    let waited = 0; // seconds spent waiting out refusals (429)
    for (;;) {
      const got = await this.attempt(call);
      if (!(got instanceof Error) && got.status === 429) {
        const pause = this.refusedPause(call, got, this.settings.rateLimitWait - waited);
        if (pause === null) return read<T>(got); // RateLimited
        waited += pause;
        this.settings.log(`${errorOf(got).type}: retrying in ${pause} s`);
        await sleep(pause);
        continue;
      }
      const pause = this.pause(call, failed, got);
      if (pause !== null) {
        failed += 1;
        await sleep(pause);
        continue;
      }
      if (got instanceof Error) {
        throw new Unavailable(`cannot reach ${this.url}: ${describe(got)}`, { cause: got });
      }
      return read<T>(got);
    }
  }

  /** One try: the answer, or the error that stood for it (refused, reset, timed out). */
  private async attempt(call: Call): Promise<Answer | Error> {
    const url = new URL(`${this.url}/api/v1/${call.path}`);
    for (const [name, value] of Object.entries(call.params ?? {})) {
      url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.settings.token}`,
      Accept: "application/json",
      "User-Agent": USER_AGENT,
    };
    if (call.body !== undefined) headers["Content-Type"] = "application/json";
    const { traceparent } = this.settings;
    const trace = typeof traceparent === "function" ? traceparent() : traceparent;
    if (trace) headers.traceparent = trace;
    try {
      const response = await fetch(url, {
        method: call.method,
        headers,
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
        signal: AbortSignal.timeout((this.settings.timeout + (call.wait ?? 0)) * 1000),
      });
      const text = await response.text();
      return { url: url.href, status: response.status, headers: response.headers, text };
    } catch (error) {
      return error instanceof Error ? error : new Error(String(error));
    }
  }

  /** Seconds to wait before sending `call` again after no answer or a 5xx; null: give up. */
  private pause(call: Call, attempt: number, got: Answer | Error): number | null {
    if (!repeatable(call) || attempt >= this.settings.retries) return null;
    const backoff = this.settings.backoff * 2 ** attempt;
    if (got instanceof Error) return backoff;
    if (!RETRIED_STATUSES.has(got.status)) return null;
    const after = retryAfter(got);
    return after !== null ? Math.min(after, MAX_PAUSE) : backoff;
  }

  /**
   * Seconds to wait out a 429 before sending `call` again: the server's Retry-After, if
   * the call may still wait that long (`left`); null to give up (`RateLimited`).
   */
  private refusedPause(call: Call, got: Answer, left: number): number | null {
    const after = retryAfter(got);
    if (!repeatable(call) || after === null) return null;
    const seconds = Math.max(after, this.settings.backoff); // a 0 still counts
    return seconds <= left ? seconds : null;
  }
}

/** Whether `call` may be sent again when no answer came: a read, or a write marked so. */
function repeatable(call: Call): boolean {
  return call.retry === true || call.method === "GET";
}

/** The answer's JSON if it succeeded; else the error it stands for, thrown. */
function read<T>(got: Answer): T {
  if (got.status >= 200 && got.status < 300) {
    try {
      return JSON.parse(got.text) as T;
    } catch {
      throw new Unavailable(`${got.url} answered ${got.status} with no JSON`);
    }
  }
  if (got.status >= 500) throw new Unavailable(`${got.url} answered ${got.status}`);
  const error = errorOf(got);
  if (got.status === 423) throw new Paused(got.status, error);
  if (got.status === 429) throw new RateLimited(got.status, error, retryAfter(got));
  throw new ApiError(got.status, error);
}

/** The answer's `{"error": {...}}`, with a type and a message whatever it held. */
function errorOf(got: Answer): ErrorBody {
  let error: unknown;
  try {
    error = (JSON.parse(got.text) as { error?: unknown }).error;
  } catch {
    error = undefined;
  }
  const body = (typeof error === "object" && error !== null ? error : {}) as Partial<ErrorBody>;
  return {
    ...body,
    type: typeof body.type === "string" ? body.type : "error",
    message: typeof body.message === "string" && body.message ? body.message : `HTTP ${got.status}`,
  };
}

/** The answer's `Retry-After` in seconds, or null if it names none. */
function retryAfter(got: Answer): number | null {
  const header = got.headers.get("Retry-After")?.trim();
  if (!header) return null;
  const seconds = Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}

/** An error of `fetch` with its cause: "fetch failed (connect ECONNREFUSED …)". */
function describe(error: Error): string {
  const cause = error.cause instanceof Error ? ` (${error.cause.message})` : "";
  return `${error.message}${cause}`;
}

/** Resolves after `seconds`. */
function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}
