import assert from "node:assert/strict";
import { once } from "node:events";
import { type AddressInfo, createServer, type Socket } from "node:net";
import { test } from "node:test";
import { KubeClient } from "./client.ts";
import { EventRecorder } from "./events.ts";

test("flushAtShutdown returns on its bound while an API server that never answers holds the write", async () => {
  // Accepts connections and never answers, not even the TLS handshake.
  const sockets = new Set<Socket>();
  const server = createServer((socket) => sockets.add(socket)).listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  const client = new KubeClient(
    {
      server: `https://127.0.0.1:${port}`,
      insecureSkipTLSVerify: true,
      credentials: async () => ({}),
      invalidate: () => undefined,
      source: "a silent server",
    },
    { component: "events-test", maxRetries: 0 },
  );
  const recorder = new EventRecorder(client, { component: "events-test", host: "h", onError: () => undefined });
  try {
    recorder.record({ apiVersion: "v1", kind: "Node", name: "n1", uid: "u1" }, "Normal", "Test", "a message");
    let written = false;
    void recorder.flush().then(() => {
      written = true;
    });
    await recorder.flushAtShutdown();
    assert.equal(written, false, "the write is still pending: flushAtShutdown returned on its bound");
  } finally {
    client.close();
    for (const socket of sockets) socket.destroy();
    server.close();
  }
});
