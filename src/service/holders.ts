// Who else takes a protocol/port on the nodes, as kube-proxy and the kubelet would serve it: every Service's
// NodePorts (kube-proxy opens them on every node), pods' hostPorts and hostNetwork pods' declared ports (on their
// node). planIngress() (decide.ts) refuses a Service a port an older one of these holds; this file reduces the
// objects to those holders and keeps them indexed by port, telling which ports changed so that the controller
// replans only the Services on them.
import type { Pod, Service } from "kubernetes-types/core/v1.js";
import { objectKey } from "../kube/informer.ts";
import type { HolderRule, PortHolder, PortHolders } from "./decide.ts";

/** One port an object holds: "TCP/30080", and how. */
export interface Claim {
  claim: string;
  holder: PortHolder;
}

/** What an object holds, and where: on one node, or on every node (node undefined). */
export interface Held {
  node: string | undefined;
  claims: Claim[];
}

/** A Service's NodePorts (any type, any class: kube-proxy serves them all), on every node. */
export function serviceNodePorts(service: Service): Held {
  const key = objectKey(service);
  const created = service.metadata?.creationTimestamp ?? "";
  const claims = (service.spec?.ports ?? []).flatMap(({ protocol = "TCP", nodePort }) =>
    nodePort ? [claimOf(`${protocol}/${nodePort}`, "node-port", "Service", key, created)] : [],
  );
  return { node: undefined, claims: unique(claims) };
}

/**
 * A pod's ports on its node: with hostNetwork every declared container port (the process binds it on the node
 * itself), else every hostPort. Init containers count: a restartable one (a sidecar) runs beside the others, and a
 * port a plain one declares is refused too rather than judged by how long it runs. A pod not bound to a node
 * holds nothing yet.
 */
export function podPorts(pod: Pod): Held {
  const { spec } = pod;
  const node = spec?.nodeName;
  if (!node) return { node: undefined, claims: [] };
  const key = objectKey(pod);
  const created = pod.metadata?.creationTimestamp ?? "";
  const hostNetwork = spec?.hostNetwork === true;
  const claims = [...(spec?.containers ?? []), ...(spec?.initContainers ?? [])].flatMap(({ ports = [] }) =>
    ports.flatMap(({ protocol = "TCP", containerPort, hostPort }) => {
      if (hostNetwork) return [claimOf(`${protocol}/${containerPort}`, "host-network-port", "Pod", key, created)];
      return hostPort ? [claimOf(`${protocol}/${hostPort}`, "host-port", "Pod", key, created)] : [];
    }),
  );
  return { node, claims: unique(claims) };
}

function claimOf(claim: string, rule: HolderRule, kind: PortHolder["kind"], key: string, created: string): Claim {
  return { claim, holder: { rule, kind, key, created } };
}

const unique = (claims: Claim[]) => [...new Map(claims.map((each) => [each.claim, each])).values()];

/** The holders by port, kept up to date one object at a time. */
export class HolderIndex {
  private readonly everywhere = new Map<string, PortHolder[]>();
  private readonly onNode = new Map<string, Map<string, PortHolder[]>>();
  /** What each object ("Pod/ns/name", "Service/ns/name") holds now. */
  private readonly objects = new Map<string, Held>();

  /** The index as planIngress() reads it (live: read it before the next set()). */
  readonly holders: PortHolders = { everywhere: this.everywhere, onNode: this.onNode };

  /**
   * Sets what an object holds (no claims: it holds nothing, or is gone). Returns the ports whose holders
   * changed: empty when the object holds what it held.
   */
  set(id: string, held: Held): Set<string> {
    const before = this.objects.get(id);
    if (before && sameHeld(before, held)) return new Set();
    if (!before && !held.claims.length) return new Set();
    const changed = new Set<string>();
    if (before) for (const { claim, holder } of before.claims) this.remove(before.node, claim, holder, changed);
    if (held.claims.length) this.objects.set(id, held);
    else this.objects.delete(id);
    for (const { claim, holder } of held.claims) {
      this.tableOf(held.node, true)?.set(claim, [...(this.tableOf(held.node)?.get(claim) ?? []), holder]);
      changed.add(claim);
    }
    return changed;
  }

  private tableOf(node: string | undefined, create = false): Map<string, PortHolder[]> | undefined {
    if (node === undefined) return this.everywhere;
    let table = this.onNode.get(node);
    if (!table && create) this.onNode.set(node, (table = new Map()));
    return table;
  }

  private remove(node: string | undefined, claim: string, holder: PortHolder, changed: Set<string>): void {
    const table = this.tableOf(node);
    const rest = (table?.get(claim) ?? []).filter((each) => each !== holder);
    if (rest.length) table?.set(claim, rest);
    else table?.delete(claim);
    if (node !== undefined && table?.size === 0) this.onNode.delete(node);
    changed.add(claim);
  }
}

function sameHeld(a: Held, b: Held): boolean {
  const text = ({ node, claims }: Held) =>
    JSON.stringify([node, claims.map(({ claim, holder: h }) => [claim, h.rule, h.kind, h.key, h.created])]);
  return text(a) === text(b);
}

/** The object's id in the index. */
export const holderId = (kind: PortHolder["kind"], obj: Pod | Service) => `${kind}/${objectKey(obj)}`;
