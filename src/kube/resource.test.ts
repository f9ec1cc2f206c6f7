import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { test } from "node:test";
import { ApiError } from "./errors.ts";
import { decodeWatchStream } from "./resource.ts";

/** The events decoded from these chunks (also into `events`, for a stream that ends in an error). */
async function decode(chunks: (string | Buffer)[], events: unknown[] = []): Promise<unknown[]> {
  for await (const event of decodeWatchStream(Readable.from(chunks) as unknown as IncomingMessage, "/x"))
    events.push(event);
  return events;
}

test("watch events are read whole wherever the chunks split them, multi-byte characters included", async () => {
  const events = [
    { type: "ADDED", object: { metadata: { name: "ä-1" } } },
    { type: "MODIFIED", object: { metadata: { name: "b" }, data: "x".repeat(300) } },
    { type: "BOOKMARK", object: { metadata: { resourceVersion: "7" } } },
  ];
  const text = Buffer.from(events.map((event) => `${JSON.stringify(event)}\n`).join("\n"));
  for (let size = 1; size <= 64; size += 7) {
    const count = Math.ceil(text.length / size);
    const chunks = Array.from({ length: count }, (_, i) => text.subarray(i * size, (i + 1) * size));
    assert.deepEqual(await decode(chunks), events, `chunks of ${size} bytes`);
  }
});

test("an event of 1 MiB in 16 KiB chunks, then an ERROR event, which throws", async () => {
  const big = { type: "ADDED", object: { metadata: { name: "big" }, spec: { request: "A".repeat(1 << 20) } } };
  const error = { type: "ERROR", object: { kind: "Status", code: 410, message: "too old resource version" } };
  const text = `${JSON.stringify(big)}\n${JSON.stringify(error)}\n`;
  const size = 16384;
  const chunks = Array.from({ length: Math.ceil(text.length / size) }, (_, i) => text.slice(i * size, (i + 1) * size));
  const seen: unknown[] = [];
  await assert.rejects(decode(chunks, seen), (err: unknown) => err instanceof ApiError && err.code === 410);
  assert.deepEqual(seen, [big]);
});
