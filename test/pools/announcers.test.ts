// Which node announces a pool address, against a real kube-apiserver: the test keeps announcer Leases as the
// agents do, and the controller records one live announcer on the segment on each Service; sticky when another
// Lease appears, moved when the Lease stops being renewed, released when the node turns NotReady and reassigned only
// once its Lease acknowledges the removal (or expires), whichever replica leads; Local only on a node with a ready
// endpoint, told when there is none, kept over a restart, and never written by a replica that does not lead. An
// address another host answers for, as its announcer's Lease reports it, is told on the Service and the pool and
// moves nowhere; another node's Lease reporting it changes nothing. Each test has a segment, pool and nodes of its own.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Event, Service } from "kubernetes-types/core/v1.js";
import { Informer } from "../../src/kube/informer.ts";
import { SERVICE_RESOURCE, Resource } from "../../src/kube/resource.ts";
import { hashString, topByScore } from "../../src/loadbalancer/rendezvous.ts";
import { L2_CLASS, POOL_ANNOTATION } from "../../src/pools/allocate.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LABEL,
  announcerLabelValue,
  RELEASED_FROM_ANNOTATION,
} from "../../src/pools/announcement.ts";
import { waitFor, waitForEqual } from "../../localcluster/wait.ts";
import { type AnnouncerLease, type PoolWorld, startPoolWorld } from "./world.ts";

const WAIT_MS = 60_000;

let world: PoolWorld;
before(async () => {
  world = await startPoolWorld();
});
after(async () => {
  await world?.stop();
});

let groups = 0;

/** A test's namespace, segment 10.77.<n>.0/24 with a pool of .10-.20 admitting only that namespace, and nodes. */
async function group(nodes: string[]) {
  const n = ++groups;
  const id = `ann${n}`;
  const namespace = await world.namespace();
  const segment = `10.77.${n}.0/24`;
  await world.createPool(id, { addresses: [`10.77.${n}.10-10.77.${n}.20`], namespaces: [namespace] });
  const names = nodes.map((node) => `${id}-${node}`);
  for (const [i, name] of names.entries())
    await world.addNode(name, [{ type: "InternalIP", address: `10.77.${n}.${i + 1}` }]);
  const announcers: { stop(): void }[] = [];
  const services = world.services(namespace);
  return {
    namespace,
    segment,
    /** The first address the pool hands out, the second, … */
    address: (i: number) => `10.77.${n}.${10 + i}`,
    node: (name: string) => `${id}-${name}`,
    nodes: names,
    announce: async (node: string, segments = [segment], spec: Partial<Lease["spec"]> = {}) => {
      const announcer = await world.announce(node, segments, [], spec);
      announcers.push(announcer);
      return announcer;
    },
    stopAnnouncing: () => announcers.forEach((each) => each.stop()),
    create: (name: string, spec: Partial<Service["spec"]> = {}) =>
      services.create({
        metadata: { name },
        spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [{ port: 80, protocol: "TCP" }], ...spec },
      }),
    pool: async () => (await world.pools.get(id)).status,
    /** The announcer annotation, and whether the label agrees with it. */
    announcer: async (name: string) => {
      const { metadata } = await services.get(name);
      const node = metadata?.annotations?.[ANNOUNCER_ANNOTATION];
      const label = metadata?.labels?.[ANNOUNCER_LABEL];
      if (label === (node === undefined ? undefined : announcerLabelValue(node))) return node;
      return `annotation ${node} but label ${label}`;
    },
    ingress: async (name: string) =>
      (await services.get(name)).status?.loadBalancer?.ingress?.map(({ ip }) => ip) ?? [],
    warnings: async (name: string) =>
      (await world.events(namespace, name)).filter(({ type }) => type === "Warning").map(({ message }) => message),
    version: async (name: string) => (await services.get(name)).metadata?.resourceVersion,
    releasedFrom: async (name: string) =>
      (await services.get(name)).metadata?.annotations?.[RELEASED_FROM_ANNOTATION],
    /** The AnnouncerAssigned Events about a Service, as "message ×count", sorted. */
    assigned: async (name: string) =>
      (await world.events(namespace, name))
        .filter(({ reason }) => reason === "AnnouncerAssigned")
        .map(({ message, count }) => `${message} ×${count}`)
        .sort(),
  };
}

/** The nodes in the order rendezvous hashing ranks them for an address (best first). */
function ranked(address: string, nodes: string[]): string[] {
  const items = nodes.map((name) => ({ name, hash: hashString(name) }));
  const order: string[] = [];
  while (items.length) {
    const [best] = topByScore(items, hashString(address), 1);
    order.push(best?.name ?? "");
    items.splice(items.indexOf(best as (typeof items)[number]), 1);
  }
  return order;
}

const until = <T>(what: string, read: () => Promise<T>, expected: T) => waitForEqual(what, read, expected, WAIT_MS);


/** Every value the announcer annotation of a Service takes, each change once, from a watch of the Service. */
function recordAnnouncers(namespace: string, name: string) {
  const seen: (string | undefined)[] = [];
  const informer = new Informer(new Resource<Service>(world.plane.admin, { ...SERVICE_RESOURCE, namespace }), {
    fieldSelector: `metadata.name=${name}`,
  });
  const record = (service: Service) => {
    const node = service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
    if (seen.length === 0 || seen.at(-1) !== node) seen.push(node);
  };
  informer.addHandlers({ onAdd: record, onUpdate: (_, service) => record(service), onDelete: () => {} });
  informer.start();
  return { seen, synced: () => informer.waitForSync(), stop: () => informer.stop() };
}

describe("announcer assignment, against kube-apiserver", () => {
  test("a live announcer on the segment is recorded (annotation, label); stays when a better one appears", async () => {
    const g = await group(["a", "off", "b0", "b1", "b2", "b3", "b4", "b5"]);
    // A node that rendezvous hashing ranks above a for both addresses: had the assignment no memory, it would move.
    const [a, off] = [g.node("a"), g.node("off")];
    const b = g.nodes.slice(2).find((node) => [0, 1].every((i) => ranked(g.address(i), [a, node])[0] === node));
    assert.ok(b, "a node ranked above a for both addresses");
    try {
      await g.announce(a);
      await g.announce(off, ["10.78.0.0/24"]);
      await world.withController(async () => {
        await g.create("web");
        await until("web announced by a, the only live announcer on its segment", () => g.announcer("web"), a);
        await g.announce(b);
        await g.create("second", { ports: [{ port: 81, protocol: "TCP" }] });
        await until("second announced by b (the controller sees b's Lease)", () => g.announcer("second"), b);
        assert.equal(await g.announcer("web"), a, "web stays on a");
      });
    } finally {
      g.stopAnnouncing();
    }
  });

  test("a Lease no longer renewed: its Services move to another live announcer once it expires", async () => {
    const g = await group(["a", "b"]);
    try {
      const renewing = new Map<string, { stop(): void }>();
      for (const node of g.nodes) renewing.set(node, await g.announce(node));
      await world.withController(async (running) => {
        await g.create("web");
        const first = await waitFor("web announced", () => g.announcer("web"), WAIT_MS);
        renewing.get(first)?.stop();
        const other = g.nodes.find((node) => node !== first);
        await until("web moved to the node still renewing", () => g.announcer("web"), other);
        assert.match(running.registry.expose(), /announcer_decisions_total\{action="announce",rule="failover"\} [1-9]/);
        await until("an Event per assignment, naming the node (and the one before)", () => g.assigned("web"), [
          `announced from node ${first} (assigned): ${first} announces (it had none) ×1`,
          `announced from node ${other}, was ${first} (failover): ${other} announces (the Lease of ${first} is not live) ×1`,
        ].sort());
      });
    } finally {
      g.stopAnnouncing();
    }
  });

  test("a forged Lease: a day's duration expires after the controller's own; an unproven segment is refused", async () => {
    const g = await group(["liar", "honest"]);
    const [liar, honest] = [g.node("liar"), g.node("honest")];
    // A segment where no Node has an address: only the liar's Lease claims it.
    const far = `10.88.${groups}`;
    await world.createPool(`${liar}-far`, { addresses: [`${far}.10`], namespaces: [g.namespace] });
    try {
      const forged = await g.announce(liar, [g.segment, `${far}.0/24`], { leaseDurationSeconds: 86_400 });
      await world.withController(async (running) => {
        await world.services(g.namespace).create({
          metadata: { name: "far", annotations: { [POOL_ANNOTATION]: `${liar}-far` } },
          spec: { type: "LoadBalancer", loadBalancerClass: L2_CLASS, ports: [{ port: 80, protocol: "TCP" }] },
        });
        await until("far allocated", () => g.ingress("far"), [`${far}.10`]);
        const refused = (message: string) => /^refused \(no-announcer\): no live announcer has a segment/.test(message);
        await waitFor("far refused an announcer", async () => (await g.warnings("far")).some(refused), WAIT_MS);
        assert.equal(await g.announcer("far"), undefined, "the liar's unproven segment is not trusted");
        assert.match(running.registry.expose(), /announcer_segments_refused [1-9]/);
        // On its proven segment it announces; unrenewed, it expires after 3 s, whatever its Lease says.
        await g.create("web");
        await until("web announced by the liar, the only Lease", () => g.announcer("web"), liar);
        await g.announce(honest);
        forged.stop();
        const stoppedAt = Date.now();
        await until("web moved once the liar stopped renewing", () => g.announcer("web"), honest);
        assert.ok(Date.now() - stoppedAt < 30_000, "moved in seconds, not after the day its Lease asked for");
      });
    } finally {
      g.stopAnnouncing();
    }
  });

  test("externalTrafficPolicy Local: only a node with a ready endpoint announces", async () => {
    const g = await group(["a", "b", "c"]);
    try {
      for (const node of g.nodes) await g.announce(node);
      // The endpoint on the node rendezvous hashing ranks last: any other choice would be wrong.
      const last = ranked(g.address(0), g.nodes).at(-1) ?? "";
      await g.create("local", { externalTrafficPolicy: "Local" });
      await world.endpoints(g.namespace, "local", [last]);
      await world.withController(async () => {
        await until("announced by the node with the endpoint", () => g.announcer("local"), last);
      });
    } finally {
      g.stopAnnouncing();
    }
  });

  test("a node turning NotReady while its Lease lives: released; another node once it acknowledged", async () => {
    const g = await group(["a", "b"]);
    try {
      const leases = new Map<string, AnnouncerLease>();
      for (const node of g.nodes) leases.set(node, await g.announce(node));
      let first = "";
      await world.withController(async () => {
        await g.create("web");
        first = await waitFor("web announced", () => g.announcer("web"), WAIT_MS);
        await world.setReady(first, "False");
        await until("web released from the NotReady node", () => g.announcer("web"), undefined);
        assert.equal(await g.releasedFrom("web"), first, "the removal names the node it was taken from");
      });
      // Another replica leads now (the one that released is gone): it waits all the same, for as long as the
      // released node's Lease lives and says less than the removal (5 s: longer than any timer would have waited).
      const other = g.nodes.find((node) => node !== first) as string;
      const recorder = recordAnnouncers(g.namespace, "web");
      try {
        await recorder.synced();
        await world.withController(async (running) => {
          await waitFor("the Leases seen live", () => /live_announcers [2-9]/.test(running.registry.expose()), WAIT_MS);
          const waiting = /announcer_decisions_total\{action="wait",rule="release-ack"\} [1-9]/;
          await waitFor("waiting for the acknowledgement", () => waiting.test(running.registry.expose()), WAIT_MS);
          const deadline = Date.now() + 5000;
          while (Date.now() < deadline) {
            assert.equal(await g.announcer("web"), undefined, "no new announcer before the acknowledgement");
            await new Promise((resolve) => setTimeout(resolve, 250));
          }
          // The released node's agent applied the removal (its watch reached the Service's version).
          leases.get(first)?.acknowledge(await g.version("web"));
          await until("web moved to the Ready node", () => g.announcer("web"), other);
          assert.equal(await g.releasedFrom("web"), undefined, "cleared with the new announcer");
          assert.deepEqual(recorder.seen, [undefined, other], "nobody in between, then the other");
          const moved = `announced from node ${other}, was ${first} (assigned): ${other} announces (it had none) ×1`;
          await waitFor("the move told, naming the node it was released from", async () => (await g.assigned("web")).includes(moved), WAIT_MS);
        });
      } finally {
        await recorder.stop();
      }
    } finally {
      g.stopAnnouncing();
    }
  });

  test("released from a node whose Lease then lapses: moved without an acknowledgement", async () => {
    const g = await group(["a", "b"]);
    try {
      const leases = new Map<string, AnnouncerLease>();
      for (const node of g.nodes) leases.set(node, await g.announce(node));
      await world.withController(async () => {
        await g.create("web");
        const first = await waitFor("web announced", () => g.announcer("web"), WAIT_MS);
        await world.setReady(first, "False");
        await until("web released", () => g.releasedFrom("web"), first);
        leases.get(first)?.stop(); // its agent stopped: it stopped announcing at its deadline
        const other = g.nodes.find((node) => node !== first);
        await until("web moved once the released node's Lease expired", () => g.announcer("web"), other);
      });
    } finally {
      g.stopAnnouncing();
    }
  });

  test("no live announcer on the segment: a Warning that says so, no announcer; one comes with a Lease", async () => {
    const g = await group(["a"]);
    try {
      await world.withController(async () => {
        await g.create("web");
        await until("allocated", () => g.ingress("web"), [g.address(0)]);
        await waitFor(
          "the no-announcer Warning",
          async () => (await g.warnings("web")).some((message) => message.startsWith("refused (no-announcer): ")),
          WAIT_MS,
        );
        assert.equal(await g.announcer("web"), undefined);
        await g.announce(g.node("a"));
        await until("announced once a Lease is live", () => g.announcer("web"), g.node("a"));
      });
    } finally {
      g.stopAnnouncing();
    }
  });

  test("a restarted controller keeps the announcers: the Service is not written again, nor told again", async () => {
    const g = await group(["a", "b"]);
    const assigned = (node: string | undefined) => [`announced from node ${node} (assigned): ${node} announces (it had none) ×1`];
    try {
      for (const node of g.nodes) await g.announce(node);
      let announcer: string | undefined;
      await world.withController(async () => {
        await g.create("web");
        announcer = await waitFor("web announced", () => g.announcer("web"), WAIT_MS);
        await until("the assignment told", () => g.assigned("web"), assigned(announcer));
      });
      const version = await g.version("web");
      await world.withController(async (running) => {
        await waitFor("the Leases seen live", () => /live_announcers [2-9]/.test(running.registry.expose()), WAIT_MS);
        await running.controller.idle();
        assert.equal(await g.announcer("web"), announcer);
        assert.equal(await g.version("web"), version, "the Service was written again");
        // A new Event would be a second object (a new process's recorder), a repeat its count.
        running.controller.resync();
        await running.controller.idle();
      });
      // Stopped, the controller has written every Event it recorded.
      assert.deepEqual(await g.assigned("web"), assigned(announcer), "told again after a restart or a resync");
    } finally {
      g.stopAnnouncing();
    }
  });

  test("a replica that does not lead writes nothing; once it leads, it assigns", async () => {
    const g = await group(["a"]);
    try {
      await world.withController(async () => {
        await g.create("web");
        await until("allocated, without announcer", () => g.ingress("web"), [g.address(0)]);
      });
      await g.announce(g.node("a"));
      const follower = await world.startController({ leader: false });
      try {
        await follower.controller.idle();
        assert.equal(follower.writes(), 0);
        assert.equal(await g.announcer("web"), undefined);
        follower.lead(true);
        follower.controller.resync();
        await until("announced by the new leader", () => g.announcer("web"), g.node("a"));
      } finally {
        await follower.stop();
      }
    } finally {
      g.stopAnnouncing();
    }
  });
  test("an address another host answers for: a Service Warning, a pool line, from its announcer only", async () => {
    const g = await group(["a", "b"]);
    const [lie, seen] = ["02:00:00:00:00:66", "02:00:00:00:00:77"];
    const eventsIn = { group: "", version: "v1", plural: "events", namespace: g.namespace };
    const events = new Resource<Event>(world.plane.admin, eventsIn);
    const inUseEvents = async () =>
      (await events.list({ fieldSelector: `involvedObject.name=web,reason=AddressInUseOnNetwork` })).items;
    const lines = async () => (await g.pool())?.conflicts ?? [];
    const ready = async () => (await g.pool())?.conditions?.find(({ type }) => type === "Ready")?.reason;
    try {
      const leases = new Map<string, AnnouncerLease>();
      for (const node of g.nodes) leases.set(node, await g.announce(node));
      await world.withController(async (running) => {
        await g.create("web");
        const announcer = await waitFor("web announced", () => g.announcer("web"), WAIT_MS);
        const other = g.nodes.find((node) => node !== announcer) as string;
        const address = g.address(0);
        await until("web's address", () => g.ingress("web"), [address]);
        // A node that does not announce web says another host answers for its address: as its token may write.
        await leases.get(other)?.report(`${address}=${lie}`);
        // Its announcer says so too, with another MAC: once that is told, the lie was seen before it (one watch).
        await leases.get(announcer)?.report(`${address}=${seen}`);
        const line =
          `${address} (Service ${g.namespace}/web) is answered by another host, ${seen}, ` +
          `on the segment of node ${announcer}`;
        await until("the pool lists the announcer's report only", lines, [line]);
        const [event, ...more] = await waitFor("the Warning on web", async () => {
          const listed = await inUseEvents();
          return listed.length > 0 && listed;
        }, WAIT_MS);
        assert.deepEqual(more, []);
        assert.equal(event?.type, "Warning");
        const named = `another host (${seen}) answers for ${address} on the segment of node ${announcer}`;
        assert.ok(event?.message?.includes(named), event?.message);
        assert.doesNotMatch(event?.message ?? "", new RegExp(lie));
        assert.equal(await ready(), "AddressesInUse");
        assert.equal(await g.announcer("web"), announcer, "not moved");
        // Told once per change, not per sync: web changed and synced again, and every Lease renewed since.
        await world.services(g.namespace).patch("web", "merge", { metadata: { labels: { touched: "yes" } } });
        await g.create("later", { ports: [{ port: 81, protocol: "TCP" }] });
        await waitFor("later announced", () => g.announcer("later"), WAIT_MS);
        await running.controller.idle();
        const told = await inUseEvents();
        assert.deepEqual(told.map(({ count }) => count ?? 1), [1]);
        // A value the agent would not write is refused whole: the report goes, as when the host leaves.
        await leases.get(announcer)?.report(`${address}=${seen},${address}=${lie}`);
        await until("a malformed report is not believed", lines, []);
        await leases.get(announcer)?.report(`${address}=${seen}`);
        await until("reported again", lines, [line]);
        await leases.get(announcer)?.report(null);
        await until("the pool's line gone with the report", lines, []);
        assert.equal(await ready(), "Serving");
        assert.equal(await g.announcer("web"), announcer, "still not moved");
      });
    } finally {
      g.stopAnnouncing();
    }
  });
});
