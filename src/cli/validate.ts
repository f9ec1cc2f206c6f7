// Small checks for FlagSpec.validate: each returns what is wrong with a value, or undefined.
import { cidrProblem } from "../net/ip.ts";

export type Check<V> = (value: V) => string | undefined;

export function inRange(min: number, max: number): Check<number> {
  return (value) => (value < min || value > max ? `must be between ${min} and ${max}` : undefined);
}

export function atLeast(min: number): Check<number> {
  return (value) => (value < min ? `must be at least ${min}` : undefined);
}

export const positive: Check<number> = (value) => (value > 0 ? undefined : "must be greater than 0");

export function oneOf(choices: readonly string[]): Check<string> {
  return (value) => (choices.includes(value) ? undefined : `must be one of: ${choices.join(", ")}`);
}

/** The first problem of any item of a list. */
export function eachItem(check: Check<string>): Check<string[]> {
  return (items) => {
    for (const item of items) {
      const problem = check(item);
      if (problem) return problem;
    }
    return undefined;
  };
}

export const noDuplicates: Check<string[]> = (items) => {
  const duplicate = items.find((item, i) => items.indexOf(item) !== i);
  return duplicate === undefined ? undefined : `"${duplicate}" is given twice`;
};

/**
 * A parser that throws a one-line Error, as a check. The flags module then returns what the parser
 * makes of the checked text, so programs get parsed values and never parse again.
 */
export function parses<V = string>(parse: (value: V) => unknown): Check<V> {
  return (value) => {
    try {
      parse(value);
      return undefined;
    } catch (err) {
      return (err as Error).message;
    }
  };
}

/** Runs checks in order; the first problem wins. */
export function all<V>(...checks: Check<V>[]): Check<V> {
  return (value) => {
    for (const check of checks) {
      const problem = check(value);
      if (problem) return problem;
    }
    return undefined;
  };
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** RFC 1123 label: namespaces. */
export const dnsLabel: Check<string> = (value) =>
  DNS_LABEL.test(value) ? undefined : "must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63)";

/** RFC 1123 subdomain: the names of Nodes and Leases. */
export const dnsSubdomain: Check<string> = (value) =>
  value.length <= 253 && value.split(".").every((label) => DNS_LABEL.test(label))
    ? undefined
    : "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.', at most 253)";

/**
 * An IPv4 or IPv6 CIDR with its prefix length: 198.18.0.0/15, fd00::/8. Read as netip.ParsePrefix reads it, refused
 * where kube-apiserver's strict validation refuses it (leading zeros, IPv4-mapped); host bits may be set.
 */
export const cidr: Check<string> = cidrProblem;
