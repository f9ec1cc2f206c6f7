export interface ProbeResult {
  /** False only when every address was probed and no probe got an answer. */
  alive: boolean;
  /** What answered, or what ran without answer: reused as the reason in logs and Events. */
  detail: string;
  /** ICMP could not run (no CAP_NET_RAW nor ping-socket permission, or no addon): TCP decided alone. */
  icmpUnavailable?: boolean;
  /** No probe could run on some address: nothing is proven, so alive is true and nothing is deleted. */
  inconclusive?: boolean;
}
