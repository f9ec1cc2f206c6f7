// The test control plane, tested against itself: versions, TLS + admin, RBAC, bound tokens with
// the node-name claim, restart, compaction, and that nothing outlives stop() or `down`; with the
// opt-in kube-controller-manager and kube-scheduler: approved CSRs are signed, pods are scheduled.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { isApiError } from "../../src/kube/errors.ts";
import { alive, run } from "../../localcluster/exec.ts";
import { ensureBinaries } from "../../localcluster/build.ts";
import { childPortRange, type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { KUBERNETES_VERSION } from "../../localcluster/versions.ts";
import { waitFor } from "../../localcluster/wait.ts";

describe("test control plane", () => {
  let plane: ControlPlane;
  before(async () => {
    plane = await startControlPlane();
  });
  after(async () => {
    await plane?.stop();
  });

  test("/version reports the pinned Kubernetes version, to our client and to kubectl", async () => {
    const version = await plane.admin.request<{ gitVersion: string; minor: string }>({
      method: "GET",
      path: "/version",
    });
    assert.equal(version.gitVersion, KUBERNETES_VERSION);
    assert.equal(version.minor, KUBERNETES_VERSION.split(".")[1]);
    const viaKubectl = JSON.parse(await plane.kubectl(["get", "--raw", "/version"])) as {
      gitVersion: string;
    };
    assert.equal(viaKubectl.gitVersion, KUBERNETES_VERSION);
    const client = JSON.parse(await run(plane.binaries.kubectl, ["version", "--client", "-o", "json"])) as {
      clientVersion: { gitVersion: string };
    };
    assert.equal(client.clientVersion.gitVersion, KUBERNETES_VERSION);
  });

  test("etcd and kube-apiserver listen below the kernel's ephemeral range, where no outgoing connection takes their port", async () => {
    const { first, end } = await childPortRange();
    const etcdArgs = readFileSync(`/proc/${plane.pids().etcd}/cmdline`, "utf8").split("\0");
    const etcdPort = Number(/:(\d+)$/.exec(etcdArgs.find((a) => a.startsWith("--listen-client-urls=")) ?? "")?.[1]);
    for (const [name, port] of [["etcd", etcdPort], ["kube-apiserver", Number(new URL(plane.server).port)]] as const)
      assert.ok(port >= first && port < end, `${name} listens at ${port}, not in ${first}-${end - 1}`);
  });

  test("the admin user (client certificate in system:masters) can write", async () => {
    const created = await plane.admin.request<{ metadata: { uid: string } }>({
      method: "POST",
      path: "/api/v1/namespaces",
      body: { metadata: { name: "admin-check" } },
    });
    assert.match(created.metadata.uid, /^[0-9a-f-]{36}$/);
    const whoami = JSON.parse(await plane.kubectl(["auth", "whoami", "-o", "json"])) as {
      status: { userInfo: { username: string; groups: string[] } };
    };
    assert.equal(whoami.status.userInfo.username, "admin");
    assert.ok(whoami.status.userInfo.groups.includes("system:masters"));
  });

  test("RBAC is enforced: a ServiceAccount without a role is Forbidden", async () => {
    const kubeconfig = await plane.serviceAccountKubeconfig({ namespace: "default", name: "nobody" });
    await assert.rejects(
      run(plane.binaries.kubectl, [`--kubeconfig=${kubeconfig}`, "get", "nodes"]),
      /forbidden.*cannot list resource "nodes"/i,
    );
  });

  test("a token bound to a Pod on a node carries the node-name extra", async () => {
    await plane.admin.request({
      method: "POST",
      path: "/api/v1/nodes",
      body: { metadata: { name: "node-a" } },
    });
    const pod = await plane.admin.request<{ metadata: { name: string; uid: string } }>({
      method: "POST",
      path: "/api/v1/namespaces/default/pods",
      body: {
        metadata: { name: "agent-on-a" },
        spec: {
          nodeName: "node-a",
          serviceAccountName: "agent",
          containers: [{ name: "agent", image: "local-ccm" }],
        },
      },
    });
    const kubeconfig = await plane.serviceAccountKubeconfig({
      namespace: "default",
      name: "agent",
      boundPod: pod.metadata,
    });
    const review = JSON.parse(
      await run(plane.binaries.kubectl, [`--kubeconfig=${kubeconfig}`, "auth", "whoami", "-o", "json"]),
    ) as {
      status: { userInfo: { username: string; extra: Record<string, string[]> } };
    };
    assert.equal(review.status.userInfo.username, "system:serviceaccount:default:agent");
    assert.deepEqual(review.status.userInfo.extra["authentication.kubernetes.io/node-name"], ["node-a"]);
    assert.deepEqual(review.status.userInfo.extra["authentication.kubernetes.io/pod-name"], ["agent-on-a"]);
  });

  test("restarting the apiserver keeps the data (same etcd) and a new process serves it", async () => {
    await plane.kubectl(["create", "configmap", "survivor", "--from-literal=k=v"]);
    const before = plane.pids();
    await plane.restartApiserver();
    const after = plane.pids();
    assert.notEqual(after.apiserver, before.apiserver);
    assert.equal(after.etcd, before.etcd);
    assert.ok(!alive(before.apiserver));
    const cm = await plane.admin.request<{ data: Record<string, string> }>({
      method: "GET",
      path: "/api/v1/namespaces/default/configmaps/survivor",
    });
    assert.deepEqual(cm.data, { k: "v" });
  });

  test("compacting etcd makes an old resourceVersion Gone once the watch cache no longer holds it", async () => {
    const cm = await plane.admin.request<{ metadata: { resourceVersion: string } }>({
      method: "POST",
      path: "/api/v1/namespaces/default/configmaps",
      body: { metadata: { name: "old" } },
    });
    for (let i = 0; i < 3; i++)
      await plane.kubectl(["label", "configmap", "old", `round=${i}`, "--overwrite"]);
    const revision = await plane.compactEtcd();
    assert.ok(revision > Number(cm.metadata.resourceVersion));
    // A fresh apiserver's watch cache starts at the current revision, so the read reaches etcd.
    await plane.restartApiserver();
    await assert.rejects(
      plane.admin.request({
        method: "GET",
        path: "/api/v1/namespaces/default/configmaps",
        query: { resourceVersion: cm.metadata.resourceVersion, resourceVersionMatch: "Exact" },
      }),
      (err) => isApiError(err) && err.code === 410,
    );
  });
});

describe("control plane with kube-controller-manager and kube-scheduler", () => {
  let plane: ControlPlane;
  let dir: string;
  before(async () => {
    plane = await startControlPlane({ controllerManager: true, scheduler: true });
    dir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-csr-"));
  });
  after(async () => {
    await plane?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const signers = [
    { signer: "kubernetes.io/kube-apiserver-client-kubelet", usages: ["digital signature", "client auth"], sans: [] },
    {
      signer: "kubernetes.io/kubelet-serving",
      usages: ["digital signature", "server auth"],
      sans: ["-addext", "subjectAltName=IP:198.18.0.10"],
    },
  ];
  for (const { signer, usages, sans } of signers) {
    test(`a CSR for ${signer}, approved by the admin, gets a certificate from the cluster CA`, async () => {
      const name = signer.split("/")[1] as string;
      const [key, request] = [path.join(dir, `${name}.key`), path.join(dir, `${name}.csr`)];
      await run("openssl", [
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key, "-out", request, "-subj", "/O=system:nodes/CN=system:node:csr-node", ...sans,
      ]);
      const csr = {
        apiVersion: "certificates.k8s.io/v1",
        kind: "CertificateSigningRequest",
        metadata: { name },
        spec: { request: readFileSync(request).toString("base64"), signerName: signer, usages },
      };
      await plane.kubectl(["create", "-f", "-"], JSON.stringify(csr));
      await plane.kubectl(["certificate", "approve", name]);
      const issued = await waitFor("the signed certificate", async () => {
        const got = JSON.parse(await plane.kubectl(["get", "csr", name, "-o", "json"])) as {
          status: { certificate?: string };
        };
        return got.status.certificate;
      }, 30_000, 250);
      const cert = path.join(dir, `${name}.crt`);
      await run("sh", ["-c", `base64 -d > ${cert}`], { input: issued });
      assert.match(await run("openssl", ["verify", "-CAfile", plane.caPath, cert]), /: OK/);
      const subject = await run("openssl", ["x509", "-in", cert, "-noout", "-subject"]);
      assert.match(subject, /O = system:nodes, CN = system:node:csr-node/);
    });
  }

  test("kube-scheduler binds a pod to a node", async () => {
    const resources = { cpu: "2", memory: "2Gi", pods: "10" };
    const node = {
      metadata: { name: "schedulable" },
      status: { capacity: resources, allocatable: resources },
    };
    await plane.admin.request({ method: "POST", path: "/api/v1/nodes", body: node });
    await plane.admin.request({
      method: "POST",
      path: "/api/v1/namespaces/default/pods",
      body: {
        metadata: { name: "to-schedule" },
        // The node posts no status: the node lifecycle controller taints it unreachable.
        spec: { containers: [{ name: "c", image: "x" }], tolerations: [{ operator: "Exists" }] },
      },
    });
    const nodeName = await waitFor("a nodeName", async () => {
      const pod = await plane.admin.request<{ spec: { nodeName?: string } }>({
        method: "GET",
        path: "/api/v1/namespaces/default/pods/to-schedule",
      });
      return pod.spec.nodeName;
    }, 30_000, 250);
    assert.equal(nodeName, "schedulable");
  });

  test("stop() ends kube-controller-manager and kube-scheduler too", async () => {
    const other = await startControlPlane({ controllerManager: true, scheduler: true });
    const pids = Object.values(other.pids());
    assert.equal(pids.length, 4);
    await other.stop();
    for (const pid of pids) assert.ok(!alive(pid), `pid ${pid} still running after stop()`);
  });
});

test("freePort() never hands out a port twice, nor one that is taken", () => {
  // In a network namespace of its own: the ports it takes are not taken from the other test files' control planes.
  const script = `
    const net = require("node:net");
    const { childPortRange, freePort } = require("./localcluster/controlplane.ts");
    const listen = (port) => new Promise((resolve) => {
      const server = net.createServer();
      server.once("error", () => resolve(undefined));
      server.listen(port, "127.0.0.1", () => resolve(server));
    });
    (async () => {
      const drawn = new Set();
      for (let i = 0; i < 300; i++) drawn.add(await freePort());
      // Every 10th port of the range taken: a draw that did not try its port would hit one of them.
      const { first, end } = await childPortRange();
      const taken = new Set();
      for (let port = first; port < end; port += 10) if (await listen(port)) taken.add(port);
      const hits = [];
      for (let i = 0; i < 300; i++) {
        const port = await freePort();
        if (taken.has(port)) hits.push(port);
      }
      console.log(JSON.stringify({ distinct: drawn.size, taken: taken.size, hits }));
      process.exit(0);
    })();
  `;
  const ran = spawnSync("unshare", ["--net", "sh", "-c", 'ip link set lo up && exec "$0" -e "$1"', process.execPath, script], {
    cwd: path.resolve(import.meta.dirname, "../.."),
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(ran.status, 0, ran.stderr);
  const result = JSON.parse(ran.stdout) as { distinct: number; taken: number; hits: number[] };
  assert.equal(result.distinct, 300, "a port was handed out twice");
  assert.ok(result.taken > 1000, `only ${result.taken} ports taken`);
  assert.deepEqual(result.hits, [], "freePort() handed out ports that were taken");
});

test("stop() leaves no process and no folder behind", async () => {
  const plane = await startControlPlane();
  const { etcd, apiserver } = plane.pids();
  assert.ok(alive(etcd) && alive(apiserver));
  await plane.stop();
  assert.ok(!alive(etcd), "etcd still running");
  assert.ok(!alive(apiserver), "kube-apiserver still running");
  assert.ok(!existsSync(plane.dir), "state folder left behind");
});

test("`npm run controlplane -- up|status|down` serves the pinned version and stops cleanly", async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-cli-"));
  const cli = (command: string) =>
    run(process.execPath, [path.join(import.meta.dirname, "../../localcluster/controlplane-cli.ts"), command], {
      env: { ...process.env, LOCAL_CCM_CONTROLPLANE_DIR: dir },
    });
  t.after(async () => {
    await cli("down").catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  });
  const upOutput = await cli("up");
  const kubeconfig = path.join(dir, "kubeconfig");
  assert.match(upOutput, new RegExp(`export KUBECONFIG=${kubeconfig}`));
  const { kubectl } = await ensureBinaries();
  const version = JSON.parse(
    await run(kubectl, [`--kubeconfig=${kubeconfig}`, "get", "--raw", "/version"]),
  ) as { gitVersion: string };
  assert.equal(version.gitVersion, KUBERNETES_VERSION);
  assert.match(await cli("status"), /readyz: ok/);
  const { pids } = JSON.parse(readFileSync(path.join(dir, "state.json"), "utf8")) as {
    pids: Record<string, number>;
  };
  assert.equal(await cli("down"), "stopped\n");
  for (const pid of Object.values(pids)) assert.ok(!alive(pid), `pid ${pid} still running after down`);
  assert.ok(!existsSync(dir));
});
