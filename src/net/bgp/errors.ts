// BGP NOTIFICATION codes and subcodes (RFC 4271 §4.5 and §6, RFC 4486 for Cease), named, and the one error type the
// decoders return: what went wrong, the NOTIFICATION that says so, and whether RFC 7606 lets the session live (the
// UPDATE is then treated as a withdrawal, which for an export-only speaker means: ignored).

export const NOTIFICATION_CODES = {
  "message-header": 1,
  open: 2,
  update: 3,
  "hold-timer-expired": 4,
  fsm: 5,
  cease: 6,
  "route-refresh": 7,
} as const;
export type NotificationCode = keyof typeof NOTIFICATION_CODES;

/** Subcodes by code; a subcode missing from its code's table is 0 ("unspecific"). */
export const NOTIFICATION_SUBCODES = {
  "message-header": { "connection-not-synchronized": 1, "bad-message-length": 2, "bad-message-type": 3 },
  open: {
    "unsupported-version-number": 1,
    "bad-peer-as": 2,
    "bad-bgp-identifier": 3,
    "unsupported-optional-parameter": 4,
    "unacceptable-hold-time": 6,
    "unsupported-capability": 7,
  },
  update: {
    "malformed-attribute-list": 1,
    "unrecognized-well-known-attribute": 2,
    "missing-well-known-attribute": 3,
    "attribute-flags-error": 4,
    "attribute-length-error": 5,
    "invalid-origin-attribute": 6,
    "invalid-next-hop-attribute": 8,
    "optional-attribute-error": 9,
    "invalid-network-field": 10,
    "malformed-as-path": 11,
  },
  "hold-timer-expired": {},
  fsm: {
    "unexpected-message-in-open-sent": 1,
    "unexpected-message-in-open-confirm": 2,
    "unexpected-message-in-established": 3,
  },
  cease: {
    "maximum-prefixes-reached": 1,
    "administrative-shutdown": 2,
    "peer-deconfigured": 3,
    "administrative-reset": 4,
    "connection-rejected": 5,
    "other-configuration-change": 6,
    "connection-collision-resolution": 7,
    "out-of-resources": 8,
  },
  "route-refresh": { "invalid-message-length": 1 },
} as const satisfies Record<NotificationCode, Record<string, number>>;

export type Subcode<C extends NotificationCode> = keyof (typeof NOTIFICATION_SUBCODES)[C] & string;

/** A NOTIFICATION as on the wire; `notificationName` names it for logs. */
export interface Notification {
  code: number;
  subcode: number;
  data: Buffer;
}

/** A message we refuse: the NOTIFICATION to send and why, in one line. */
export interface BgpError {
  notification: Notification;
  reason: string;
  /** RFC 7606 treat-as-withdraw: the session stays up and the UPDATE's routes count as withdrawn. */
  treatAsWithdraw: boolean;
}

export function notification<C extends NotificationCode>(
  code: C,
  subcode: Subcode<C> | "unspecific",
  data: Buffer = Buffer.alloc(0),
): Notification {
  const subcodes: Record<string, number> = NOTIFICATION_SUBCODES[code];
  return { code: NOTIFICATION_CODES[code], subcode: subcodes[subcode] ?? 0, data };
}

export function bgpError<C extends NotificationCode>(
  code: C,
  subcode: Subcode<C> | "unspecific",
  reason: string,
  data?: Buffer,
  treatAsWithdraw = false,
): BgpError {
  return { notification: notification(code, subcode, data), reason, treatAsWithdraw };
}

/** "update/malformed-as-path"; numbers where RFC 4271 and 4486 name nothing ("9/1", "cease/12"). */
export function notificationName({ code, subcode }: { code: number; subcode: number }): string {
  const name = (Object.keys(NOTIFICATION_CODES) as NotificationCode[]).find((key) => NOTIFICATION_CODES[key] === code);
  if (!name) return `${code}/${subcode}`;
  const subcodes: Record<string, number> = NOTIFICATION_SUBCODES[name];
  const sub = subcode === 0 ? "unspecific" : Object.keys(subcodes).find((key) => subcodes[key] === subcode);
  return `${name}/${sub ?? subcode}`;
}
