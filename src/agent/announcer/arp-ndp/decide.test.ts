import assert from "node:assert/strict";
import { test } from "node:test";
import { type ArpPacket, gratuitousArp } from "../../../net/arp.ts";
import { answerArp, answerSolicitation } from "./decide.ts";

const link = { mac: "02:00:00:00:00:0a" };
const announced = new Set(["198.18.5.5", "fd00:198:18::55"]);
const request = (targetIp: string, senderIp = "198.18.0.9"): ArpPacket => ({
  operation: "request",
  senderMac: "02:00:00:00:00:09",
  senderIp,
  targetMac: "00:00:00:00:00:00",
  targetIp,
});

test("ARP: only requests for announced addresses are answered, to the asker, with the link's MAC", () => {
  const cases: [string, ArpPacket, string][] = [
    ["a request for an announced address", request("198.18.5.5"), "announced"],
    ["an ARP probe (sender 0.0.0.0) for it", request("198.18.5.5", "0.0.0.0"), "announced"],
    ["a request for another address", request("198.18.5.6"), "not-announced"],
    ["a reply", { ...request("198.18.5.5"), operation: "reply" }, "not-request"],
    ["another host's gratuitous ARP for it", gratuitousArp("198.18.5.5", "02:00:00:00:00:0b"), "announcement"],
  ];
  for (const [name, packet, rule] of cases) assert.equal(answerArp(packet, link, announced).rule, rule, name);

  const decision = answerArp(request("198.18.5.5"), link, announced);
  assert.equal(decision.action, "answer");
  assert.deepEqual(decision.action === "answer" && decision.answer, {
    packet: {
      operation: "reply",
      senderMac: link.mac,
      senderIp: "198.18.5.5",
      targetMac: "02:00:00:00:00:09",
      targetIp: "198.18.0.9",
    },
    to: "02:00:00:00:00:09",
  });
  const asker = "198.18.0.9 (02:00:00:00:00:09)";
  assert.equal(decision.reason, `request from ${asker} about 198.18.5.5: answered with ${link.mac}`);
});

test("NDP: solicitations for announced addresses are answered with override; from :: to all nodes, unsolicited", () => {
  const solicitation = { target: "fd00:198:18::55", sourceMac: "02:00:00:00:00:09" };
  const fromAsker = answerSolicitation(solicitation, "fe80::9", link, announced);
  assert.deepEqual(fromAsker.action === "answer" && fromAsker.answer, {
    advert: { target: "fd00:198:18::55", mac: link.mac, solicited: true, override: true },
    to: "fe80::9",
  });
  const duplicateCheck = answerSolicitation({ target: "fd00:198:18::55" }, "::", link, announced);
  assert.deepEqual(duplicateCheck.action === "answer" && duplicateCheck.answer, {
    advert: { target: "fd00:198:18::55", mac: link.mac, solicited: false, override: true },
    to: "ff02::1",
  });
  assert.equal(answerSolicitation({ target: "fd00:198:18::56" }, "fe80::9", link, announced).rule, "not-announced");
  assert.equal(answerSolicitation(solicitation, "::", link, announced).rule, "dad-with-option");
});
