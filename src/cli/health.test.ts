import assert from "node:assert/strict";
import http from "node:http";
import { describe, test } from "node:test";
import https from "node:https";
import {
  type HealthServer,
  parseBindAddress,
  type Readiness,
  startHealthServer,
  startMetricsServer,
} from "./health.ts";
import type { Access } from "./metricsauth.ts";
import { selfSignedCertificate } from "./selfsigned.ts";
import { METRICS_CONTENT_TYPE, Registry } from "./metrics.ts";

describe("parseBindAddress", () => {
  test("IPv4, IPv6 in brackets, all addresses, disabled", () => {
    assert.deepEqual(parseBindAddress("127.0.0.1:10263"), { host: "127.0.0.1", port: 10263 });
    assert.deepEqual(parseBindAddress("[::1]:0"), { host: "::1", port: 0 });
    assert.deepEqual(parseBindAddress("[fd00:198:18::1]:8080"), { host: "fd00:198:18::1", port: 8080 });
    assert.deepEqual(parseBindAddress(":10263"), { port: 10263 });
    assert.deepEqual(parseBindAddress("0.0.0.0:1"), { host: "0.0.0.0", port: 1 });
    assert.equal(parseBindAddress(""), undefined);
    // As Go's net.SplitHostPort: brackets around IPv4 too, so "[$(POD_IP)]:port" fits either family.
    assert.deepEqual(parseBindAddress("[10.0.0.7]:10263"), { host: "10.0.0.7", port: 10263 });
  });

  const bad: [string, RegExp][] = [
    ["10263", /must be host:port/],
    ["::1:80", /must be host:port/],
    ["127.0.0.1", /must be host:port/],
    ["127.0.0.1:", /must be host:port/],
    ["127.0.0.1:x", /must be host:port/],
    ["127.0.0.1:65536", /port 65536 is out of range/],
    ["localhost:80", /"localhost" is not an IP address/],
    ["300.0.0.1:80", /is not an IP address/],
    ["[localhost]:80", /"localhost" is not an IP address/],
    ["[]:80", /must be host:port/],
  ];
  for (const [text, message] of bad) {
    test(`"${text}" is rejected`, () => assert.throws(() => parseBindAddress(text), message));
  }
});

interface Response {
  status: number;
  type: string | undefined;
  body: string;
}

function get(host: string, port: number, path: string, method = "GET"): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, path, method, agent: false, timeout: 5000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        body += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, type: res.headers["content-type"], body }));
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
    req.end();
  });
}

async function refused(host: string, port: number): Promise<void> {
  await assert.rejects(get(host, port, "/healthz"), { code: "ECONNREFUSED" });
}

async function withServer(
  host: string | undefined,
  ready: () => Readiness | Promise<Readiness>,
  fn: (server: HealthServer, registry: Registry) => Promise<void>,
): Promise<void> {
  const registry = new Registry();
  const server = await startHealthServer({ address: { host, port: 0 }, ready, metrics: registry });
  try {
    await fn(server, registry);
  } finally {
    await server.close();
  }
}

describe("health server", () => {
  test("/healthz, /readyz ok, /metrics, 404 and 405, HEAD", async () => {
    await withServer(
      "127.0.0.1",
      () => ({ ok: true }),
      async (server, registry) => {
        assert.notEqual(server.port, 0);
        assert.equal(server.address, `127.0.0.1:${server.port}`);
        registry.counter({ name: "reconciles_total", help: "Reconciles." }).inc();
        assert.deepEqual(await get("127.0.0.1", server.port, "/healthz"), {
          status: 200,
          type: "text/plain; charset=utf-8",
          body: "ok\n",
        });
        assert.equal((await get("127.0.0.1", server.port, "/readyz")).body, "ok\n");
        const metrics = await get("127.0.0.1", server.port, "/metrics");
        assert.equal(metrics.status, 200);
        assert.equal(metrics.type, METRICS_CONTENT_TYPE);
        assert.equal(metrics.body, registry.expose());
        assert.match(metrics.body, /\nreconciles_total 1\n/);
        assert.equal((await get("127.0.0.1", server.port, "/readyz?verbose")).status, 200);
        assert.equal((await get("127.0.0.1", server.port, "/other")).status, 404);
        assert.equal((await get("127.0.0.1", server.port, "/healthz", "POST")).status, 405);
        assert.deepEqual(await get("127.0.0.1", server.port, "/healthz", "HEAD"), {
          status: 200,
          type: "text/plain; charset=utf-8",
          body: "",
        });
      },
    );
  });

  test("/readyz answers 503 with the reason, and follows the check as it changes", async () => {
    let readiness: Readiness = { ok: false, reason: "node watch not synced" };
    await withServer(
      "127.0.0.1",
      async () => readiness,
      async (server) => {
        assert.deepEqual(await get("127.0.0.1", server.port, "/readyz"), {
          status: 503,
          type: "text/plain; charset=utf-8",
          body: "node watch not synced\n",
        });
        readiness = { ok: true };
        assert.equal((await get("127.0.0.1", server.port, "/readyz")).status, 200);
        readiness = { ok: false };
        assert.equal((await get("127.0.0.1", server.port, "/readyz")).body, "not ready\n");
        assert.equal((await get("127.0.0.1", server.port, "/healthz")).status, 200);
      },
    );
  });

  test("a readiness check that throws is not ready, with its message", async () => {
    await withServer(
      "127.0.0.1",
      () => {
        throw new Error("cache broken");
      },
      async (server) => {
        const res = await get("127.0.0.1", server.port, "/readyz");
        assert.equal(res.status, 503);
        assert.equal(res.body, "readiness check failed: cache broken\n");
      },
    );
  });

  test("binds exactly the IPv4 address it is given", async () => {
    await withServer(
      "127.0.0.1",
      () => ({ ok: true }),
      async (server) => {
        assert.equal((await get("127.0.0.1", server.port, "/healthz")).status, 200);
        await refused("127.0.0.2", server.port);
        await refused("::1", server.port);
      },
    );
  });

  test("binds exactly the IPv6 address it is given", async () => {
    await withServer(
      "::1",
      () => ({ ok: true }),
      async (server) => {
        assert.equal(server.address, `[::1]:${server.port}`);
        assert.equal((await get("::1", server.port, "/healthz")).status, 200);
        await refused("127.0.0.1", server.port);
      },
    );
  });

  test("no host: every address of both families", async () => {
    await withServer(
      undefined,
      () => ({ ok: true }),
      async (server) => {
        assert.equal(server.address, `:${server.port}`);
        assert.equal((await get("127.0.0.1", server.port, "/healthz")).status, 200);
        assert.equal((await get("::1", server.port, "/healthz")).status, 200);
      },
    );
  });

  test("a port in use is a one-line error naming the address", async () => {
    await withServer(
      "127.0.0.1",
      () => ({ ok: true }),
      async (server) => {
        await assert.rejects(
          startHealthServer({
            address: { host: "127.0.0.1", port: server.port },
            ready: () => ({ ok: true }),
            metrics: new Registry(),
          }),
          { message: `cannot listen on 127.0.0.1:${server.port}: EADDRINUSE` },
        );
      },
    );
  });

  test("close() ends keep-alive connections and frees the port", async () => {
    const server = await startHealthServer({
      address: { host: "127.0.0.1", port: 0 },
      ready: () => ({ ok: true }),
      metrics: new Registry(),
    });
    const agent = new http.Agent({ keepAlive: true });
    try {
      await new Promise<void>((resolve, reject) => {
        http
          .get({ host: "127.0.0.1", port: server.port, path: "/metrics", agent }, (res) => {
            res.resume();
            res.on("end", resolve);
          })
          .on("error", reject);
      });
      assert.equal(Object.keys(agent.freeSockets).length, 1); // a scraper's idle connection is open
      await server.close(); // resolves despite it (the test's timeout bounds this)
      await refused("127.0.0.1", server.port);
    } finally {
      agent.destroy();
    }
  });
});

describe("metrics server", () => {
  test("without metrics, the health server has no /metrics", async () => {
    const server = await startHealthServer({ address: { host: "127.0.0.1", port: 0 }, ready: () => ({ ok: true }) });
    try {
      assert.equal((await get("127.0.0.1", server.port, "/metrics")).status, 404);
      assert.equal((await get("127.0.0.1", server.port, "/healthz")).status, 200);
    } finally {
      await server.close();
    }
  });

  test("secure: HTTPS with the given certificate, each request authorized from its Authorization header", async () => {
    const { certPem, keyPem } = selfSignedCertificate({ commonName: "t", dnsNames: [], ips: ["127.0.0.1"], validForMs: 3_600_000 });
    const registry = new Registry();
    registry.counter({ name: "reconciles_total", help: "Reconciles." }).inc();
    const refusals: string[] = [];
    const decide = async (header: string | undefined, path: string): Promise<Access> => {
      if (header === "Bearer good") return { allowed: true, user: "prom" };
      if (header === "Bearer broken") throw new Error("never reached: decide reports failures as 500");
      return header
        ? { allowed: false, status: 403, rule: "authorization", reason: `user "bob" may not get ${path}` }
        : { allowed: false, status: 401, rule: "bearer-token", reason: "no bearer token" };
    };
    const server = await startMetricsServer({
      address: { host: "127.0.0.1", port: 0 },
      metrics: registry,
      tls: { cert: certPem, key: keyPem },
      authorize: decide,
      onRefused: (refusal) => refusals.push(`${refusal.status} ${refusal.rule}`),
    });
    const scrape = (authorization?: string) =>
      new Promise<Response>((resolve, reject) => {
        const headers = authorization ? { authorization } : undefined;
        https
          .get({ host: "127.0.0.1", port: server.port, path: "/metrics", ca: certPem, agent: false, headers }, (res) => {
            let body = "";
            res.on("data", (chunk: Buffer) => (body += chunk.toString()));
            res.on("end", () => resolve({ status: res.statusCode ?? 0, type: res.headers["content-type"], body }));
          })
          .on("error", reject);
      });
    try {
      assert.deepEqual(await scrape(), { status: 401, type: "text/plain; charset=utf-8", body: "Unauthorized: no bearer token\n" });
      assert.deepEqual(await scrape("Bearer other"), {
        status: 403,
        type: "text/plain; charset=utf-8",
        body: 'Forbidden: user "bob" may not get /metrics\n',
      });
      const ok = await scrape("Bearer good");
      assert.equal(ok.status, 200);
      assert.equal(ok.type, METRICS_CONTENT_TYPE);
      assert.match(ok.body, /\nreconciles_total 1\n/);
      assert.deepEqual(refusals, ["401 bearer-token", "403 authorization"]);
      // Plain HTTP on the TLS port gets no metrics.
      await assert.rejects(get("127.0.0.1", server.port, "/metrics"));
    } finally {
      await server.close();
    }
  });
});
