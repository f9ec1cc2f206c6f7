import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import {
  MAX_REPORT_LENGTH,
  parseSessionReport,
  SESSION_STATES,
  type SessionState,
  sessionReportText,
} from "./sessions.ts";

const ruleOf = (text: string) => {
  const report = parseSessionReport(text);
  return report && "rule" in report ? `${report.rule}: ${report.reason}` : "taken";
};

describe("parseSessionReport", () => {
  test("a report of RFC 4271 states by peer name is taken; no annotation is no report", () => {
    assert.equal(parseSessionReport(undefined), undefined);
    assert.deepEqual(parseSessionReport("{}"), { sessions: new Map() });
    assert.deepEqual(
      parseSessionReport('{"tor-a":"Established","tor-b.rack-1":"Active"}'),
      { sessions: new Map([["tor-a", "Established"], ["tor-b.rack-1", "Active"]]) },
    );
  });

  const refusals: [string, RegExp][] = [
    ["", /^report-malformed: not JSON$/],
    ["{", /^report-malformed: not JSON$/],
    ['["tor-a"]', /^report-malformed: not a JSON object/],
    ["null", /^report-malformed: not a JSON object/],
    ['"Established"', /^report-malformed: not a JSON object/],
    ['{"Tor":"Established"}', /^report-malformed: "Tor" is not a BGPPeer name$/],
    ['{"__proto__":"Established"}', /^report-malformed: "__proto__" is not a BGPPeer name$/],
    [`{"${"a".repeat(254)}":"Idle"}`, /^report-malformed: "a{64}" is not a BGPPeer name$/],
    ['{"tor-a":"Established","tor-b":"Up"}', /^report-unknown-state: peer tor-b: "Up" is not one of Idle, Connect, /],
    ['{"tor-a":"established"}', /^report-unknown-state: peer tor-a: "established"/],
    ['{"tor-a":1}', /^report-unknown-state: peer tor-a: 1 is not one of/],
    ['{"tor-a":{"state":"Idle"}}', /^report-unknown-state: peer tor-a: \{"state":"Idle"\} is not/],
    [`{"tor-a":"Idle"${" ".repeat(MAX_REPORT_LENGTH)}}`, /^report-too-long: 16400 characters, more than 16384$/],
  ];
  test("a malformed, oversized or unknown-state report is refused whole, with its rule and why", () => {
    for (const [text, pattern] of refusals) assert.match(ruleOf(text), pattern, text.slice(0, 80));
  });

  test("what sessionReportText writes parses back to the same sessions, whatever their order", () => {
    const name = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/);
    fc.assert(
      fc.property(fc.dictionary(name, fc.constantFrom(...SESSION_STATES)), (sessions) => {
        const text = sessionReportText(sessions as Record<string, SessionState>);
        assert.deepEqual(parseSessionReport(text), { sessions: new Map(Object.entries(sessions)) });
        const reversed = Object.fromEntries(Object.entries(sessions).reverse()) as Record<string, SessionState>;
        assert.equal(sessionReportText(reversed), text);
      }),
    );
  });

  test("any text is taken or refused with one of its rules, never thrown on", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.json()), (text) => {
        assert.match(ruleOf(text), /^(taken|report-(too-long|malformed|unknown-state): .+)$/);
      }),
    );
  });
});
