// ApiError across copies of its module: the agent's lazy parts are bundles of their own, each with its copy of the
// class, and an error the program's client made must be an ApiError (its reason readable) to them all.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ApiError, isApiError, isTransient } from "./errors.ts";

test("an ApiError of another copy of the module is an ApiError here, and the other way round", async () => {
  // Another URL: Node loads a second, separate instance of the module, as a second bundle holds one.
  const other = (await import(`./errors.ts?copy=${Date.now()}`)) as typeof import("./errors.ts");
  assert.notEqual(other.ApiError, ApiError, "two copies of the class");
  const theirs = new other.ApiError(410, { reason: "Expired" }, "list");
  assert.ok(theirs instanceof ApiError);
  assert.ok(isApiError(theirs, "Expired"));
  assert.ok(other.isApiError(new ApiError(503, undefined, "get"), "ServiceUnavailable"));
  assert.ok(isTransient(new other.ApiError(503, undefined, "get")));
  for (const value of [new Error("Expired"), { reason: "Expired", code: 410 }, null, undefined, "ApiError"])
    assert.equal(isApiError(value), false, String(value));
});
