// The BFD Control packet (RFC 5880 §4.1) without its optional authentication section, and the reception checks
// of §6.8.6 that need no session. We never configure authentication, so a packet with the A bit is dropped, as
// §6.8.6 requires of a session without it. Intervals are in microseconds, as on the wire.

export type BfdState = "admin-down" | "down" | "init" | "up";
export const STATES: readonly BfdState[] = ["admin-down", "down", "init", "up"];

/** §4.1's diagnostic codes: why the sender's session last left Up (0 while it never did). */
export const Diag = {
  NONE: 0,
  DETECTION_TIME_EXPIRED: 1,
  ECHO_FAILED: 2,
  NEIGHBOR_SIGNALED_DOWN: 3,
  FORWARDING_PLANE_RESET: 4,
  PATH_DOWN: 5,
  CONCATENATED_PATH_DOWN: 6,
  ADMINISTRATIVELY_DOWN: 7,
  REVERSE_CONCATENATED_PATH_DOWN: 8,
} as const;

export interface ControlPacket {
  /** 0-31. */
  diag: number;
  state: BfdState;
  poll: boolean;
  final: boolean;
  /** Control Plane Independent. */
  cpi: boolean;
  demand: boolean;
  /** 1-255. */
  detectMult: number;
  /** Non-zero. */
  myDiscriminator: number;
  /** Zero only while the sender is Down or AdminDown. */
  yourDiscriminator: number;
  desiredMinTx: number;
  requiredMinRx: number;
  requiredMinEchoRx: number;
}

export interface Dropped {
  /** The check of §6.8.6 that failed (a rule id for logs and metrics). */
  drop: string;
  reason: string;
}

const VERSION = 1;
export const CONTROL_LENGTH = 24;

export function encodeControl(packet: ControlPacket): Buffer {
  const bytes = Buffer.alloc(CONTROL_LENGTH);
  bytes[0] = (VERSION << 5) | (packet.diag & 0x1f);
  bytes[1] =
    (STATES.indexOf(packet.state) << 6) |
    (packet.poll ? 0x20 : 0) |
    (packet.final ? 0x10 : 0) |
    (packet.cpi ? 0x08 : 0) |
    (packet.demand ? 0x02 : 0);
  bytes[2] = packet.detectMult;
  bytes[3] = CONTROL_LENGTH;
  bytes.writeUInt32BE(packet.myDiscriminator >>> 0, 4);
  bytes.writeUInt32BE(packet.yourDiscriminator >>> 0, 8);
  bytes.writeUInt32BE(packet.desiredMinTx >>> 0, 12);
  bytes.writeUInt32BE(packet.requiredMinRx >>> 0, 16);
  bytes.writeUInt32BE(packet.requiredMinEchoRx >>> 0, 20);
  return bytes;
}

/** The packet, or which of §6.8.6's drop rules it breaks. Never throws. */
export function decodeControl(bytes: Uint8Array): ControlPacket | Dropped {
  const drop = (rule: string, reason: string): Dropped => ({ drop: rule, reason });
  if (bytes.length < CONTROL_LENGTH) return drop("short", `${bytes.length} bytes`);
  const version = bytes[0]! >> 5;
  if (version !== VERSION) return drop("version", `version ${version}`);
  const flags = bytes[1]!;
  const length = bytes[3]!;
  const authenticated = (flags & 0x04) !== 0;
  // with the A bit, the authentication section follows: at least 2 bytes more
  if (length < CONTROL_LENGTH + (authenticated ? 2 : 0)) return drop("length", `length ${length}`);
  if (length > bytes.length) return drop("length", `length ${length} beyond the ${bytes.length}-byte payload`);
  if (flags & 0x01) return drop("multipoint", "the M bit is set");
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, CONTROL_LENGTH);
  const state = STATES[flags >> 6]!;
  const packet: ControlPacket = {
    diag: bytes[0]! & 0x1f,
    state,
    poll: (flags & 0x20) !== 0,
    final: (flags & 0x10) !== 0,
    cpi: (flags & 0x08) !== 0,
    demand: (flags & 0x02) !== 0,
    detectMult: bytes[2]!,
    myDiscriminator: view.readUInt32BE(4),
    yourDiscriminator: view.readUInt32BE(8),
    desiredMinTx: view.readUInt32BE(12),
    requiredMinRx: view.readUInt32BE(16),
    requiredMinEchoRx: view.readUInt32BE(20),
  };
  if (packet.detectMult === 0) return drop("detect-mult", "detect mult 0");
  if (packet.myDiscriminator === 0) return drop("my-discriminator", "my discriminator 0");
  if (packet.yourDiscriminator === 0 && state !== "down" && state !== "admin-down")
    return drop("your-discriminator", `your discriminator 0 in state ${state}`);
  if (authenticated) return drop("authentication", "the A bit is set and no authentication is configured");
  return packet;
}

export const isDropped = (result: ControlPacket | Dropped): result is Dropped => "drop" in result;
