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

export class ApiError extends Error {
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
