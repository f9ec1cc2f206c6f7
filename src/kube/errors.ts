// Errors from the API server, typed by the `reason` of the Status object it returned.
import type { Status } from "kubernetes-types/meta/v1.js";

export type ApiReason =
  | "NotFound"
  | "Conflict"
  | "AlreadyExists"
  | "Forbidden"
  | "Unauthorized"
  | "Gone"
  | "Expired"
  | "TooManyRequests"
  | "Invalid"
  | "BadRequest"
  | "MethodNotAllowed"
  | "Timeout"
  | "ServerTimeout"
  | "InternalError"
  | "ServiceUnavailable"
  | "Unknown";

const REASON_BY_CODE: Record<number, ApiReason> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  405: "MethodNotAllowed",
  409: "Conflict",
  410: "Gone",
  422: "Invalid",
  429: "TooManyRequests",
  500: "InternalError",
  503: "ServiceUnavailable",
  504: "Timeout",
};

/**
 * An ApiError made by one copy of this module is one to every other: the agent's lazy parts are bundles of their own
 * (localcluster/bundle.ts), each with its copy of this class, and an informer there reads the errors of the
 * program's client. The registry symbol is the same in every copy.
 */
const API_ERROR = Symbol.for("local-ccm.io/ApiError");

export class ApiError extends Error {
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === "object" && value !== null && (value as { [API_ERROR]?: unknown })[API_ERROR] === true;
  }
  readonly [API_ERROR] = true;
  readonly code: number;
  readonly reason: ApiReason;
  readonly status: Status | undefined;
  /** Seconds the server asked us to wait (Retry-After), if it said. */
  readonly retryAfterSeconds: number | undefined;

  constructor(code: number, status: Status | undefined, context: string, retryAfterSeconds?: number) {
    const reason = (status?.reason as ApiReason | undefined) || REASON_BY_CODE[code] || "Unknown";
    super(`${context}: ${reason} (${code}): ${status?.message ?? "no message"}`);
    this.name = "ApiError";
    this.code = code;
    this.reason = reason;
    this.status = status;
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export function isApiError(err: unknown, reason?: ApiReason): err is ApiError {
  return err instanceof ApiError && (reason === undefined || err.reason === reason);
}

/** Errors worth retrying for an idempotent request: the server was busy or briefly broken. */
export function isTransient(err: unknown): boolean {
  if (err instanceof ApiError) return err.code === 429 || err.code >= 500;
  return isConnectionError(err);
}

/** A connection-level failure (refused, reset, timed out, TLS hiccup) rather than an API answer. */
export function isConnectionError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return (
    typeof code === "string" &&
    /^(ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|UND_ERR_|ERR_STREAM_PREMATURE_CLOSE|ECONNABORTED|ERR_HTTP2|ENOTFOUND|RequestTimeout)/.test(
      code,
    )
  );
}
