// Ethernet (EUI-48) addresses as text the way iproute2 and Go's net.HardwareAddr print them: six lowercase
// hex pairs joined by colons. Codecs read and write the bytes; everything else passes the text.

export const BROADCAST_MAC = "ff:ff:ff:ff:ff:ff";
export const ZERO_MAC = "00:00:00:00:00:00";

export function macFromBytes(bytes: Uint8Array): string {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join(":");
}

/** The six bytes of "aa:bb:cc:dd:ee:ff"; throws on anything else (a MAC comes from the kernel, never from users). */
export function macToBytes(mac: string): Buffer {
  if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(mac)) throw new Error(`not an Ethernet address: ${mac}`);
  return Buffer.from(mac.replaceAll(":", ""), "hex");
}
