// Rendezvous (highest-random-weight) hashing: each Service ranks the nodes by a score of the pair (Service UID,
// node name) and takes the top N. A node that joins or leaves moves only its own place, so at most one entry of
// each Service's ingress changes. Names are hashed once (per Node event, per Service); a pair costs one mix.

/** FNV-1a, 32 bits, over the string's UTF-16 code units. */
export function hashString(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

/** MurmurHash3's finalizer: every input bit flips each output bit with probability about 1/2. */
function mix(value: number): number {
  let h = value >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The score of a pair; mixing the node's hash first keeps nearby names from ranking alike for every Service. */
export function pairScore(serviceHash: number, nodeHash: number): number {
  return mix(serviceHash ^ mix(nodeHash));
}

/** Whether a node of this score and name ranks above another: the higher score, on a tie the smaller name. */
export function outranks(score: number, name: string, otherScore: number, otherName: string): boolean {
  return score > otherScore || (score === otherScore && name < otherName);
}

/** The `count` items of highest score for `serviceHash` (ties by name), in no particular order. */
export function topByScore<T extends { name: string; hash: number }>(
  items: readonly T[],
  serviceHash: number,
  count: number,
): T[] {
  if (items.length <= count) return [...items];
  // A sorted window of the best so far: at N ≪ nodes, most items fail the first comparison. No closure per item:
  // under --jitless, allocating one for each of 5,000 nodes doubled the cost of a pick.
  const best: { item: T; score: number }[] = [];
  for (const item of items) {
    const score = pairScore(serviceHash, item.hash);
    let at = best.length;
    while (at > 0) {
      const other = best[at - 1] as { item: T; score: number };
      if (!outranks(score, item.name, other.score, other.item.name)) break;
      at--;
    }
    if (at === count) continue;
    best.splice(at, 0, { item, score });
    if (best.length > count) best.pop();
  }
  return best.map(({ item }) => item);
}
