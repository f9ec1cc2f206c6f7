// Announcing on this node, whatever the method: whether it announces at all (the method's select(), from its Node's
// labels), one watch of the Services the method names, and what the node must announce from them (desired.ts), handed to
// the method (method.ts) on every change. How and where an address is announced, and everything the method needs
// besides (links, a Lease, peers), is the method's own: see arp-ndp/ and bgp/.
import type { Service } from "kubernetes-types/core/v1.js";
import type { Logger } from "../../cli/log.ts";
import type { KubeClient } from "../../kube/client.ts";
import { Informer } from "../../kube/informer.ts";
import { Resource, SERVICE_RESOURCE } from "../../kube/resource.ts";
import { WorkQueue } from "../../kube/workqueue.ts";
import type { Gauge } from "../../cli/metrics.ts";
import { Pacer } from "../../time/pacer.ts";
import { decideDesired } from "./desired.ts";
import { type AnnouncementMethod, type MethodDefinition, NODE_UNKNOWN, type Selection } from "./method.ts";

export interface AnnouncingOptions {
  client: KubeClient;
  node: string;
  log: Logger;
  /** The method's selection gauge: 1 for the rule that decides, 0 for its others. */
  selection: Gauge<"rule">;
  method: MethodDefinition;
  /** Called after each pass over the Services: work the program trims its memory after (memoryrelease.ts). */
  worked?: () => void;
}

interface Announcing {
  /** Withdraws everything (the method stops; see AnnouncementMethod.stop), then stops watching. */
  stop(shutdown: boolean): Promise<void>;
}

export interface SelectedAnnouncing {
  /** Decides again (the Node's watch saw a change, or what the method's select() reads did). */
  update(): void;
  /** Stops deciding, then stops announcing as on SIGTERM (everything withdrawn first). */
  stop(): Promise<void>;
}

/**
 * Announcing only while this node is selected (the method's select(), from `nodeLabels()`): started when the decision turns
 * to announce; when it turns away, the method withdraws everything at once and lets go (ARP/NDP deletes its Lease, so
 * the pool controller moves the node's addresses without waiting for it to expire). Not selected, the node opens no
 * Service watch and the method starts nothing (what a crashed earlier run left is removed). Decisions run one at a
 * time, through a work queue of one key.
 */
export function announceWhileSelected(
  options: AnnouncingOptions,
  nodeLabels: () => Record<string, string> | undefined,
): SelectedAnnouncing {
  const { node, selection: gauge, method } = options;
  const log = options.log.with({ node });
  let announcing: Announcing | undefined;
  let lastRule: string | undefined;
  /** Until this run first announces or looks: something of an earlier run may be left. */
  let leftoverPossible = true;
  /** Logs a change of rule once, and sets the gauge. */
  const report = (selection: Selection) => {
    if (selection.rule !== lastRule) {
      const what = selection.announce ? "this node announces" : "this node does not announce";
      log.info(`${method.name}: ${what}: ${selection.reason}`, { rule: selection.rule });
    }
    lastRule = selection.rule;
    for (const rule of method.selectionRules) gauge.with({ rule }).set(rule === selection.rule ? 1 : 0);
  };
  const follow = async (selection: Selection) => {
    if (selection.announce) {
      leftoverPossible = false; // the method's own from now on, let go when it stops
      announcing ??= await startAnnouncing(options);
      return;
    }
    const stopping = announcing;
    announcing = undefined;
    await stopping?.stop(false);
    if (selection.rule !== NODE_UNKNOWN && leftoverPossible) {
      await method.clearLeftovers();
      leftoverPossible = false;
    }
  };
  const queue = new WorkQueue({
    async sync() {
      const selection = method.select(nodeLabels());
      report(selection);
      await follow(selection);
    },
    onError: (_, err, retryInMs) =>
      log.error(`${method.name}: following the node selection failed`, { err, retryInMs }),
  });
  queue.add(node);
  return {
    update: () => queue.add(node),
    async stop() {
      await queue.stop();
      await announcing?.stop(true);
    },
  };
}

/**
 * What desired.ts and the methods read of a Service (its class and traffic policy for BGP, the method's
 * annotations): the rest is never cached.
 */
function trimmer(annotations: readonly string[]): (service: Service) => Service {
  return (service) => {
    const { namespace, name, resourceVersion, deletionTimestamp } = service.metadata ?? {};
    const kept = Object.entries(service.metadata?.annotations ?? {}).filter(([key]) => annotations.includes(key));
    return {
      metadata: { namespace, name, resourceVersion, deletionTimestamp, annotations: Object.fromEntries(kept) },
      spec: {
        type: service.spec?.type,
        loadBalancerClass: service.spec?.loadBalancerClass,
        externalTrafficPolicy: service.spec?.externalTrafficPolicy,
      },
      status: { loadBalancer: { ingress: (service.status?.loadBalancer?.ingress ?? []).map(({ ip }) => ({ ip })) } },
    };
  };
}

/**
 * While Services keep changing, what this node announces is decided again at most this often (and in at most a
 * quarter of the time): a change after a quiet spell, such as a failover's, is taken in at once.
 */
const MIN_APPLY_INTERVAL_MS = 100;

async function startAnnouncing(options: AnnouncingOptions): Promise<Announcing> {
  const { client, node, method: definition } = options;
  const log = options.log.with({ node });
  // The watch is renewed every 1-2 min, not 30-60 as the Node's: a connection that died silently is then noticed
  // within minutes (its idle timeout), not an hour in which the node might go on announcing an address since given
  // to another. Beside a method's own traffic (ARP/NDP renews its Lease every second) it costs nothing.
  const services = new Informer(new Resource<Service>(client, SERVICE_RESOURCE), {
    ...(definition.watch.labelSelector === undefined ? {} : { labelSelector: definition.watch.labelSelector }),
    transform: trimmer(definition.watch.annotations),
    watchTimeoutSeconds: { min: 60, max: 120 },
    onError: (err) => log.error("watching the Services to announce failed", { err }),
  });
  let stopped = false;
  let method: AnnouncementMethod | undefined = undefined; // redecide may be called while it starts
  // Only the whole view, once the first list is in: a part of it (the list's first page, its events one by one)
  // would read as the rest withdrawn, and a BGP session's first table is final for its peer (End-of-RIB). A pass
  // reads every Service: paced (time/pacer.ts), the changes that come meanwhile are taken in by the next one.
  const pacer = new Pacer(MIN_APPLY_INTERVAL_MS);
  let queued: NodeJS.Timeout | undefined;
  const apply = () => {
    if (queued || stopped) return;
    queued = setTimeout(() => {
      queued = undefined;
      if (!stopped && services.hasSynced()) {
        pacer.run(() => method?.apply(decideDesired(services.list(), definition.refuse)));
        options.worked?.();
      }
    }, pacer.wait());
  };
  method = await definition.start(services, apply);
  services.addHandlers({ onAdd: apply, onUpdate: apply, onDelete: apply });
  services.start();
  void services.waitForSync().then(apply);
  return {
    async stop(shutdown) {
      stopped = true;
      clearTimeout(queued);
      await method?.stop(shutdown);
      await services.stop();
    },
  };
}
