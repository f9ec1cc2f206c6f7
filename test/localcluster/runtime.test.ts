// Which runtime packages the cluster asks for, from which files are there.
import assert from "node:assert/strict";
import { test } from "node:test";
import { CNI_BIN_DIR, missingRuntimePackages } from "../../localcluster/runtime.ts";

test("missingRuntimePackages names each package of which a file is missing", () => {
  const cases: [string, (file: string) => boolean, string[]][] = [
    ["everything there", () => true, []],
    ["no CNI bridge plugin", (file) => file !== `${CNI_BIN_DIR}/bridge`, ["containernetworking-plugins"]],
    ["containerd without its shim", (file) => !file.endsWith("containerd-shim-runc-v2"), ["containerd"]],
    ["a fresh machine", () => false, [
      "containerd", "runc", "containernetworking-plugins", "iptables", "nftables", "gcc", "libc6-dev", "dash",
      "netcat-openbsd", "curl", "wget", "gobgpd", "frr", "frr-pythontools", "tini", "bird2", "shellcheck", "skopeo",
    ]],
  ];
  for (const [name, exists, expected] of cases) assert.deepEqual(missingRuntimePackages(exists), expected, name);
});
