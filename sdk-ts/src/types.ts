/**
 * What Airlock answers, typed: a proposal and an execution's result, each read from
 * the API's JSON (kept whole in `raw`) into the few fields an agent acts on.
 *
 * @module
 */

/** A JSON value, as the API sends and takes it. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/** A reviewer's decision on a proposal, as the API lists it. */
export interface DecisionData {
  reviewer: string;
  kind: string;
  comment: string;
  [key: string]: unknown;
}

/** An execution as `GET /api/v1/executions/{id}` answers it (the result contract). */
export interface ExecutionData {
  id: number;
  proposal_id: number | null;
  action: string;
  status: string;
  success: boolean;
  stdout: string;
  stderr: string;
  exit_code: number | null;
  duration_ms: number | null;
  error: string;
  /** Only in a proposal's inline `result`: stdout or stderr was cut there. */
  output_truncated?: boolean;
  [key: string]: unknown;
}

/** A proposal as `/api/v1/proposals` answers it. */
export interface ProposalData {
  id: number;
  status: string;
  action: string;
  parameters: Json;
  reason: string;
  risk: { score: number; reasons: string[] };
  decision_path: { reason?: string; [key: string]: unknown } | null;
  decisions: DecisionData[];
  execution_id: number | null;
  execution_status: string | null;
  idempotency_key: string | null;
  withdraw_reason?: string | null;
  /** Only in the answer to a wait `until=finished` once the run ended. */
  result?: ExecutionData;
  [key: string]: unknown;
}

/**
 * A proposal: `status` is `pending` or `approved`, or final: `denied`, `rejected`,
 * `expired`, `withdrawn`; `executionId` once approved.
 */
export class Proposal {
  readonly id: number;
  readonly status: string;
  readonly action: string;
  /** The risk score, 0 to 10, and the reasons for it. */
  readonly risk: number;
  readonly reasons: readonly string[];
  readonly executionId: number | null;
  readonly executionStatus: string | null;
  /** The API's answer as it came. */
  readonly raw: ProposalData;

  constructor(data: ProposalData) {
    this.id = data.id;
    this.status = data.status;
    this.action = data.action;
    this.risk = data.risk.score;
    this.reasons = [...data.risk.reasons];
    this.executionId = data.execution_id ?? null;
    this.executionStatus = data.execution_status ?? null;
    this.raw = data;
  }

  /**
   * Why it ended as it did: the agent's reason for withdrawing it, the reviewers'
   * comments, else the policy's reason.
   */
  get reason(): string {
    if (this.status === "withdrawn") {
      return this.raw.withdraw_reason || "withdrawn by the agent";
    }
    const comments = (this.raw.decisions ?? [])
      .filter((d) => d.kind === "reject" || this.status !== "rejected")
      .map((d) => (d.comment ? `${d.reviewer}: ${d.comment}` : d.reviewer));
    if (comments.length > 0) return comments.join("; ");
    return this.raw.decision_path?.reason || this.status;
  }
}

/**
 * An execution's result: `status` is `succeeded`, `failed`, `timed_out`, `cancelled`,
 * `lost` (or still `queued`, `running`).
 */
export class Result {
  readonly executionId: number;
  readonly status: string;
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly durationMs: number | null;
  /** What went wrong outside the program (a sandbox error, a timeout), or "". */
  readonly error: string;
  /** The API's answer as it came. */
  readonly raw: ExecutionData;

  constructor(data: ExecutionData) {
    this.executionId = data.id;
    this.status = data.status;
    this.exitCode = data.exit_code ?? null;
    this.stdout = data.stdout ?? "";
    this.stderr = data.stderr ?? "";
    this.durationMs = data.duration_ms ?? null;
    this.error = data.error ?? "";
    this.raw = data;
  }

  /** Whether it ran to success. */
  get succeeded(): boolean {
    return this.status === "succeeded";
  }
}
