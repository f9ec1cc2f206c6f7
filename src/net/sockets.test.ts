// The sockets addon itself, on this process's loopback and its own netlink socket (nothing leaves the host):
// threads and descriptors come and go with the sockets, datagrams arrive in order, errors carry errno names.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createSocket } from "node:dgram";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { BUN, NO_BUN } from "../../localcluster/bun.ts";
import { waitFor } from "../../localcluster/wait.ts";
import { Bpf, bpfProgram, Family, ipSockaddr, openSocket, sockaddrIp, type Socket, SocketType } from "./sockets.ts";

const NETLINK_ROUTE = { family: Family.NETLINK, type: SocketType.RAW, protocol: 0 };
const UDP = { family: Family.INET, type: SocketType.DGRAM, protocol: 0 };
const IPPROTO_IP = 0;
const IP_RECVERR = 11;

/** What this process holds that the addon makes: its threads (named by it), sockets and eventfds. */
function held() {
  const threads = readdirSync("/proc/self/task").filter(
    (task) => readFileSync(`/proc/self/task/${task}/comm`, "utf8").trim() === "ccm-socket",
  ).length;
  const links = readdirSync("/proc/self/fd").flatMap((fd) => {
    try {
      return [readlinkSync(`/proc/self/fd/${fd}`)];
    } catch {
      return []; // the listing's own descriptor, closed by now
    }
  });
  return {
    threads,
    sockets: links.filter((link) => link.startsWith("socket:")).length,
    eventfds: links.filter((link) => link === "anon_inode:[eventfd]").length,
  };
}

/** sockaddr_in of 127.0.0.1:port. */
function loopback(port: number): Buffer {
  const address = Buffer.alloc(16);
  address.writeUInt16LE(Family.INET, 0);
  address.writeUInt16BE(port, 2);
  address.set([127, 0, 0, 1], 4);
  return address;
}

/** A UDP socket of the addon bound to a free loopback port. */
function udpOnLoopback(onReceive: Parameters<typeof openSocket>[1]): { socket: Socket; port: number } {
  for (let attempt = 0; ; attempt++) {
    const socket = openSocket(UDP, onReceive);
    const port = 20000 + Math.floor(Math.random() * 40000);
    try {
      socket.bind(loopback(port));
      return { socket, port };
    } catch (err) {
      socket.close();
      if ((err as NodeJS.ErrnoException).code !== "EADDRINUSE" || attempt === 20) throw err;
    }
  }
}

test("each socket has one thread and two descriptors; close ends the thread while it blocks, nothing leaks", () => {
  const before = held();
  for (let round = 0; round < 5; round++) {
    const sockets = Array.from({ length: 40 }, () => openSocket(NETLINK_ROUTE, () => {}));
    assert.deepEqual(held(), {
      threads: before.threads + 40,
      sockets: before.sockets + 40,
      eventfds: before.eventfds + 40,
    });
    for (const socket of sockets) socket.close();
    // close() joins the thread: it is gone when close returns, not some time later.
    assert.deepEqual(held(), before, `round ${round}`);
    for (const socket of sockets) socket.close(); // idempotent
  }
});

test("datagrams arrive in the order sent, each with its sender's address", async () => {
  const received: number[] = [];
  const sources = new Set<string>();
  const { socket, port } = udpOnLoopback((error, data, source) => {
    assert.equal(error, null);
    received.push(data.readUInt32BE(0));
    sources.add(source.toString("hex"));
  });
  const sender = createSocket("udp4");
  try {
    await new Promise<void>((resolve) => sender.bind(0, "127.0.0.1", resolve));
    // In batches that fit the receive buffer: the kernel drops what overflows it, as it should.
    for (let batch = 0; batch < 20; batch++) {
      for (let i = 0; i < 50; i++) sender.send(Buffer.from([0, 0, batch, i]), port, "127.0.0.1");
      await waitFor(`batch ${batch} received`, () => received.length === 50 * (batch + 1), 60_000);
    }
    assert.deepEqual(received, Array.from({ length: 1000 }, (_, n) => Math.floor(n / 50) * 256 + (n % 50)));
    assert.deepEqual([...sources], [loopback(sender.address().port).toString("hex")]);
  } finally {
    sender.close();
    socket.close();
  }
});

test("errors carry the errno name: from socket(), bind(), sendto(), setsockopt() and a receive", async () => {
  const codeOf = (fn: () => unknown) => {
    try {
      fn();
    } catch (err) {
      assert.match((err as Error).message, new RegExp(`${(err as NodeJS.ErrnoException).code}`));
      return (err as NodeJS.ErrnoException).code;
    }
    return "no error";
  };
  const noSuchFamily = { family: 4242, type: SocketType.DGRAM, protocol: 0 };
  assert.equal(codeOf(() => openSocket(noSuchFamily, () => {})), "EAFNOSUPPORT");
  const errors: (string | undefined)[] = [];
  const received: string[] = [];
  const { socket, port } = udpOnLoopback((error, data) => {
    if (error) errors.push((error as NodeJS.ErrnoException).code);
    else received.push(data.toString());
  });
  try {
    assert.equal(codeOf(() => socket.bind(loopback(port))), "EINVAL"); // bound already
    assert.equal(codeOf(() => socket.send(Buffer.from("x"), "not an address")), "EINVAL");
    assert.equal(codeOf(() => socket.setOption(IPPROTO_IP, 9999, 1)), "ENOPROTOOPT");
    // With IP_RECVERR, the port-unreachable answer to a datagram sent to a closed port is a receive error; the
    // socket goes on receiving after it.
    socket.setOption(IPPROTO_IP, IP_RECVERR, 1);
    const closed = udpOnLoopback(() => {});
    closed.socket.close();
    socket.send(Buffer.from("to nobody"), loopback(closed.port));
    await waitFor("the receive error", () => errors.length > 0, 60_000);
    assert.deepEqual(errors, ["ECONNREFUSED"]);
    socket.send(Buffer.from("to myself"), loopback(port));
    await waitFor("a datagram after the error", () => received.length > 0, 60_000);
    assert.deepEqual([errors, received], [["ECONNREFUSED"], ["to myself"]]);
  } finally {
    socket.close();
  }
  assert.equal(codeOf(() => socket.send(Buffer.from("x"), loopback(port))), "EBADF");
  assert.equal(held().threads, 0);
});

test("a BPF filter drops what it returns 0 for before it is queued; a malformed program is EINVAL", async () => {
  const received: number[] = [];
  const { socket, port } = udpOnLoopback((error, data) => {
    if (!error) received.push(data[0] ?? -1);
  });
  const sender = createSocket("udp4");
  try {
    // A UDP socket's filter reads the datagram from its UDP header: the payload's first byte is at offset 8.
    socket.attachFilter(
      bpfProgram([
        { code: Bpf.LOAD_BYTE, k: 8 },
        { code: Bpf.JUMP_IF_EQUAL, k: 1, jf: 1 },
        { code: Bpf.RETURN, k: 0xffff },
        { code: Bpf.RETURN, k: 0 },
      ]),
    );
    for (const first of [2, 1, 3, 1, 2, 1]) sender.send(Buffer.from([first]), port, "127.0.0.1");
    // Datagrams arrive in order: had a dropped one passed, it would show before the last accepted one.
    await waitFor("the accepted datagrams", () => received.length >= 3, 60_000);
    assert.deepEqual(received, [1, 1, 1]);
    const codeOf = (program: Buffer) => {
      try {
        socket.attachFilter(program);
        return "no error";
      } catch (err) {
        return (err as NodeJS.ErrnoException).code;
      }
    };
    assert.equal(codeOf(Buffer.alloc(0)), "EINVAL");
    assert.equal(codeOf(Buffer.alloc(12)), "EINVAL"); // not whole instructions
    // The kernel checks programs: a jump past the end.
    assert.equal(codeOf(bpfProgram([{ code: Bpf.JUMP_IF_EQUAL, k: 1, jt: 5 }])), "EINVAL");
  } finally {
    sender.close();
    socket.close();
  }
});

test("a socket closed by its own receive callback stops there: nothing more is delivered", async () => {
  let deliveries = 0;
  const { socket, port } = udpOnLoopback(() => {
    deliveries++;
    socket.close();
  });
  const sender = createSocket("udp4");
  try {
    for (let i = 0; i < 20; i++) sender.send("x", port, "127.0.0.1");
    await waitFor("the first delivery", () => deliveries > 0, 60_000);
    await waitFor("the thread gone", () => held().threads === 0, 60_000);
    // Whatever was queued behind the first datagram is dropped with the socket.
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(deliveries, 1);
  } finally {
    sender.close();
  }
});

const RUNTIMES = [
  { name: "node", run: (script: string) => [process.execPath, "--expose-gc", "--input-type=module", "-e", script] },
  { name: "bun", run: (script: string) => [BUN, "-e", script], skip: NO_BUN },
];
const run = ([file, ...args]: string[]) => {
  const ran = spawnSync(file as string, args, { encoding: "utf8", timeout: 60_000 });
  return { code: ran.status, stdout: ran.stdout, stderr: ran.stderr };
};

for (const runtime of RUNTIMES) {
  const name = `${runtime.name}: an open socket keeps the process alive only while keepAlive is on`;
  test(name, { skip: runtime.skip }, () => {
    const script = (keepAlive: boolean) => `
      import { openSocket } from ${JSON.stringify(new URL("./sockets.ts", import.meta.url).href)};
      const socket = openSocket({ family: 16, type: 3, protocol: 0 }, () => {});
      socket.keepAlive(${keepAlive});
      // Fires only if something else keeps the event loop running.
      setTimeout(() => { console.log("kept alive"); socket.close(); }, 100).unref();`;
    assert.deepEqual(run(runtime.run(script(true))), { code: 0, stdout: "kept alive\n", stderr: "" });
    assert.deepEqual(run(runtime.run(script(false))), { code: 0, stdout: "", stderr: "" });
  });

  const collected = `${runtime.name}: a kept-alive socket outlives its collected handle; onReceive throws uncaught`;
  test(collected, { skip: runtime.skip }, async () => {
    const free = createSocket("udp4");
    await new Promise<void>((resolve) => free.bind(0, "127.0.0.1", resolve));
    const port = free.address().port;
    free.close();
    const script = `
      import { createSocket } from "node:dgram";
      import { openSocket } from ${JSON.stringify(new URL("./sockets.ts", import.meta.url).href)};
      process.on("uncaughtException", (err) => { console.log(err.message); process.exit(0); });
      (() => {
        // Nothing refers to this socket once the function returns: not even its callback.
        const socket = openSocket({ family: 2, type: 2, protocol: 0 }, () => {
          throw new Error("thrown by onReceive");
        });
        socket.bind(Buffer.from(${JSON.stringify([...loopback(port)])}));
        socket.keepAlive(true);
      })();
      typeof Bun === "object" ? Bun.gc(true) : gc();
      // Later: finalizers of collected objects run after the collection, on a later turn of the event loop.
      setTimeout(() => {
        const sender = createSocket("udp4");
        sender.send("x", ${port}, "127.0.0.1", () => sender.close());
      }, 100);`;
    assert.deepEqual(run(runtime.run(script)), { code: 0, stdout: "thrown by onReceive\n", stderr: "" });
  });
}

test("bun: netlink and ICMP work through the programs' own modules", { skip: NO_BUN }, () => {
  const fixture = path.resolve(import.meta.dirname, "../../test/deploy/addons-fixture.ts");
  const { code, stdout, stderr } = run([BUN, fixture]);
  assert.equal(code, 0, stderr);
  const { icmp, routeSource } = JSON.parse(stdout) as { icmp: { kind: string; reason?: string }; routeSource: string };
  assert.equal(routeSource, "127.0.0.1");
  // As root (CAP_NET_RAW) a raw socket answers; otherwise a ping socket, where ping_group_range admits us.
  if (process.getuid?.() === 0) assert.deepEqual(icmp, { kind: "answered" });
  else assert.doesNotMatch(icmp.reason ?? "", /addon not built/);
});

test("sockaddr_in and sockaddr_in6: the kernel binds to what ipSockaddr builds and reports it back as sockaddrIp reads", async () => {
  for (const [kind, address] of [
    [UDP, "127.0.0.1"],
    [{ ...UDP, family: Family.INET6 }, "::1"],
  ] as const) {
    const received: { address: string; port: number }[] = [];
    const receiver = openSocket(kind, (err, _data, source) => !err && received.push(sockaddrIp(source)!));
    const sender = openSocket(kind, () => {});
    try {
      receiver.bind(ipSockaddr(address, 0)); // port 0: the kernel's pick, which we then learn from a datagram
      sender.bind(ipSockaddr(address, 49152 + (process.pid % 16000)));
      const probe = createSocket(address.includes(":") ? "udp6" : "udp4");
      await new Promise<void>((resolve) => probe.bind(0, address, resolve));
      receiver.send(Buffer.from("x"), ipSockaddr(address, probe.address().port));
      const port = await new Promise<number>((resolve) => probe.once("message", (_m, info) => resolve(info.port)));
      sender.send(Buffer.from("y"), ipSockaddr(address, port));
      await waitFor("the datagram", () => received.length > 0, 10_000);
      assert.deepEqual(received[0], { address, port: 49152 + (process.pid % 16000) });
      probe.close();
    } finally {
      receiver.close();
      sender.close();
    }
  }
});
