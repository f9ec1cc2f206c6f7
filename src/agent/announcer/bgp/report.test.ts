// The session report's text from the sessions' phases (pure): RFC 4271's names, Idle for selected peers without a
// session, and always a report the bgppeer-status controller takes (parseSessionReport).
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { parseSessionReport } from "../../../bgppeers/sessions.ts";
import type { Phase } from "./fsm.ts";
import { sessionReport } from "./report.ts";

const PHASES: Phase[] = ["idle", "connecting", "open-sent", "open-confirm", "established", "stopped"];

test("report: each phase by its RFC 4271 name; a selected peer without a session is Idle", () => {
  const cases: [string, [string, Phase][], string[], string][] = [
    ["nothing", [], [], "{}"],
    ["established", [["tor-a", "established"]], [], '{"tor-a":"Established"}'],
    ["connecting is Connect", [["tor-a", "connecting"]], [], '{"tor-a":"Connect"}'],
    ["open-sent, open-confirm", [["b", "open-sent"], ["a", "open-confirm"]], [], '{"a":"OpenConfirm","b":"OpenSent"}'],
    ["stopped is Idle", [["tor-a", "stopped"]], [], '{"tor-a":"Idle"}'],
    ["no session (no next hop)", [["tor-a", "established"]], ["tor-b"], '{"tor-a":"Established","tor-b":"Idle"}'],
  ];
  for (const [name, phases, without, text] of cases) assert.equal(sessionReport(new Map(phases), without), text, name);
});

test("report (property): the controller takes every report an agent writes, with the same states", () => {
  const name = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/);
  fc.assert(
    fc.property(fc.dictionary(name, fc.constantFrom(...PHASES)), fc.array(name), (phases, without) => {
      const map = new Map(Object.entries(phases));
      const parsed = parseSessionReport(sessionReport(map, without));
      assert.ok(parsed && "sessions" in parsed, "taken whole");
      for (const peer of without) if (!map.has(peer)) assert.equal(parsed.sessions.get(peer), "Idle");
      for (const [peer, phase] of map)
        assert.equal(parsed.sessions.get(peer) === "Established", phase === "established", `${peer}: ${phase}`);
      assert.equal(parsed.sessions.size, new Set([...map.keys(), ...without]).size);
    }),
  );
});
