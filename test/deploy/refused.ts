// What the API server said when it refused a request the test expected it to refuse.
import assert from "node:assert/strict";
import { type ApiReason, isApiError } from "../../src/kube/errors.ts";

/**
 * Runs `request` and returns the message of its refusal for one of `reasons`; fails if it was allowed or
 * failed otherwise.
 */
export async function refused(request: () => Promise<unknown>, ...reasons: ApiReason[]): Promise<string> {
  try {
    await request();
  } catch (err) {
    if (reasons.some((reason) => isApiError(err, reason))) return (err as Error).message;
    throw err;
  }
  assert.fail("the request was allowed");
}

/** The message of a Forbidden answer (RBAC or an admission policy). */
export const denial = (request: () => Promise<unknown>): Promise<string> => refused(request, "Forbidden");
