// TCP MD5 signatures with Linux itself, on this process's loopback (nothing leaves the host): a signed connection
// with the right key gets through, IPv4 and IPv6 and an IPv4 peer of a dual-stack listener; a wrong key or none
// never reaches the listener (the kernel counts the dropped SYNs, which is what the tests wait for).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type net from "node:net";
import { after, test } from "node:test";
import { waitFor } from "../../localcluster/wait.ts";
import { md5Drops } from "../../test/netns/netns.ts";
import {
  connectTcp,
  listenTcp,
  MAX_PASSWORD_BYTES,
  md5Signature,
  passwordProblem,
  type TcpListener,
} from "./tcpmd5.ts";

const rootDrops = () => md5Drops(readFileSync("/proc/net/netstat", "utf8"));

const listeners: TcpListener[] = [];
after(() => Promise.all(listeners.map((listener) => listener.close())));

/** A listener that echoes, and the sockets it accepted. */
async function echo(host: string): Promise<{ listener: TcpListener; accepted: net.Socket[] }> {
  const accepted: net.Socket[] = [];
  const listener = await listenTcp({ host, port: 0 }, (socket) => {
    accepted.push(socket);
    socket.on("data", (data) => socket.end(data));
    socket.resume();
  });
  listeners.push(listener);
  return { listener, accepted };
}

/** What the listener echoed on a connection with `password`, or the error. */
function exchange(host: string, port: number, password: string | undefined): Promise<string> {
  return new Promise((resolve) => {
    const socket = connectTcp({ host, port, password });
    let answer = "";
    socket.on("connect", () => socket.write("ping"));
    socket.on("data", (data) => (answer += data));
    socket.on("error", (err) => (answer = `error: ${err.message}`));
    socket.on("close", () => resolve(answer));
  });
}

for (const [name, listenOn, peer] of [
  ["IPv4", "127.0.0.1", "127.0.0.1"],
  ["IPv6", "::1", "::1"],
  ["an IPv4 peer of a dual-stack listener", "::", "127.0.0.1"],
] as const) {
  test(`${name}: the right key connects; a wrong key or none never reaches the listener`, async () => {
    const { listener, accepted } = await echo(listenOn);
    listener.setPassword(peer, "right horse battery");
    const port = listener.address().port;
    assert.equal(await exchange(peer, port, "right horse battery"), "ping");
    assert.equal(accepted.length, 1);
    for (const password of ["wrong horse battery", undefined]) {
      const drops = rootDrops();
      const socket = connectTcp({ host: peer, port, password });
      socket.on("error", () => {});
      try {
        const key = password ? "wrong" : "missing";
        await waitFor(`the kernel drops the SYN (key ${key})`, () => rootDrops() > drops, 20_000);
      } finally {
        socket.destroy();
      }
      assert.equal(accepted.length, 1, "nothing more accepted");
    }
    // the key removed: an unsigned connection gets through again
    listener.setPassword(peer, undefined);
    assert.equal(await exchange(peer, port, undefined), "ping");
  });
}

test("passwords: at most 80 bytes, not empty, never in messages; a bad host fails as a connection does", async () => {
  assert.equal(passwordProblem("x".repeat(MAX_PASSWORD_BYTES)), undefined);
  const long = "secret".repeat(20);
  assert.match(passwordProblem(long) ?? "", /120 bytes, more than Linux's 80/);
  assert.ok(!(passwordProblem(long) ?? "").includes("secret"));
  assert.equal(passwordProblem(""), "the TCP MD5 password is empty");
  assert.throws(() => md5Signature(4, "127.0.0.1", long), (err: Error) => !err.message.includes("secret"));
  // struct tcp_md5sig: sockaddr_in6 of the v4-mapped peer, key length at 130, key at 136
  const option = md5Signature(6, "198.18.0.1", "abc");
  assert.equal(option.length, 216);
  assert.deepEqual([option.readUInt16LE(0), option.readUInt16LE(130)], [10, 3]);
  assert.equal(option.subarray(8, 24).toString("hex"), "00000000000000000000ffffc6120001");
  assert.equal(option.subarray(136, 139).toString(), "abc");
  assert.match(await exchange("no.such.host", 179, undefined), /^error: not an IP address/);
});
