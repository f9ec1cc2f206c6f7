// Bounds-checked reading of a BGP message body: every read names the error to refuse with when the bytes run out,
// so a decoder cannot read past what it was given and never throws anything but a Refusal, which the public
// decoders turn into a BgpError. Work is linear in the bytes given (at most one 4096-byte message).
import { type BgpError } from "./errors.ts";

export class Refusal extends Error {
  readonly error: BgpError;
  constructor(error: BgpError) {
    super(error.reason);
    this.error = error;
  }
}

export class Reader {
  readonly bytes: Buffer;
  offset = 0;
  readonly end: number;
  private readonly short: () => BgpError;

  /** A reader of bytes[start, end); `short` is the error when a read runs past end. */
  constructor(bytes: Buffer, short: () => BgpError, start = 0, end = bytes.length) {
    this.bytes = bytes;
    this.offset = start;
    this.end = end;
    this.short = short;
  }

  get remaining(): number {
    return this.end - this.offset;
  }

  private need(n: number): number {
    if (n > this.remaining) throw new Refusal(this.short());
    const at = this.offset;
    this.offset += n;
    return at;
  }

  u8(): number {
    return this.bytes.readUInt8(this.need(1));
  }

  u16(): number {
    return this.bytes.readUInt16BE(this.need(2));
  }

  u32(): number {
    return this.bytes.readUInt32BE(this.need(4));
  }

  take(n: number): Buffer {
    const at = this.need(n);
    return this.bytes.subarray(at, at + n);
  }

  /** A reader of the next n bytes, with its own error for running past them; this reader moves past them. */
  sub(n: number, short: () => BgpError, outer: () => BgpError = this.short): Reader {
    if (n > this.remaining) throw new Refusal(outer());
    const at = this.need(n);
    return new Reader(this.bytes, short, at, at + n);
  }
}

export function refuse(error: BgpError): never {
  throw new Refusal(error);
}
