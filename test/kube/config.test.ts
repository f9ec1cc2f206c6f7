// Client configuration variants, each proven by a request to the real apiserver that reports who
// we are (SelfSubjectReview): client certificate, token, rotating token file, exec plugin with
// expiry and 401 re-run, simulated in-cluster config. Plus the clear errors for bad input.
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { KubeClient } from "../../src/kube/client.ts";
import { type ClientConfig, ConfigError, loadClientConfig } from "../../src/kube/config.ts";
import { type ControlPlane, startControlPlane } from "../../localcluster/controlplane.ts";
import { waitFor } from "../../localcluster/wait.ts";

async function whoami(config: ClientConfig): Promise<string> {
  const client = new KubeClient(config, { component: "config-test", maxRetries: 0 });
  try {
    const review = await client.request<{ status: { userInfo: { username: string } } }>({
      method: "POST",
      path: "/apis/authentication.k8s.io/v1/selfsubjectreviews",
      body: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
    });
    return review.status.userInfo.username;
  } finally {
    client.close();
  }
}

function kubeconfigToken(kubeconfig: string): string {
  return (JSON.parse(readFileSync(kubeconfig, "utf8")) as { users: { user: { token: string } }[] }).users[0]
    ?.user.token as string;
}

describe("client configuration against the real apiserver", () => {
  let plane: ControlPlane;
  let dir: string;
  /** A fresh token for ServiceAccount `name` in default. */
  const tokenFor = async (name: string) =>
    kubeconfigToken(await plane.serviceAccountKubeconfig({ namespace: "default", name }));
  const kubeconfig = (file: string, user: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
    const admin = JSON.parse(readFileSync(plane.kubeconfigPath, "utf8")) as { clusters: unknown[] };
    writeFileSync(
      path.join(dir, file),
      JSON.stringify({ ...admin, users: [{ name: "user", user }], ...extra }),
    );
    return path.join(dir, file);
  };

  before(async () => {
    plane = await startControlPlane();
    dir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-config-"));
  });
  after(async () => {
    await plane?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("client certificate (admin kubeconfig, files referenced relative to the kubeconfig)", async () => {
    assert.equal(await whoami(await loadClientConfig({ kubeconfig: plane.kubeconfigPath })), "admin");
    const certs = JSON.parse(readFileSync(plane.kubeconfigPath, "utf8")) as {
      users: { user: Record<string, string> }[];
    };
    const user = certs.users[0]?.user as Record<string, string>;
    writeFileSync(
      path.join(dir, "admin.crt"),
      Buffer.from(user["client-certificate-data"] as string, "base64"),
    );
    writeFileSync(path.join(dir, "admin.key"), Buffer.from(user["client-key-data"] as string, "base64"));
    const file = kubeconfig("files.kubeconfig", {
      "client-certificate": "admin.crt",
      "client-key": "admin.key",
    });
    assert.equal(await whoami(await loadClientConfig({ kubeconfig: file })), "admin");
  });

  test("bearer token, and a named context chosen over current-context", async () => {
    const token = await tokenFor("alice");
    const file = kubeconfig(
      "contexts.kubeconfig",
      { token },
      {
        contexts: [
          { name: "local", context: { cluster: "local", user: "user" } },
          { name: "broken", context: { cluster: "nowhere", user: "user" } },
        ],
        "current-context": "broken",
      },
    );
    await assert.rejects(
      loadClientConfig({ kubeconfig: file }),
      /names cluster "nowhere", which is not defined/,
    );
    assert.equal(
      await whoami(await loadClientConfig({ kubeconfig: file, context: "local" })),
      "system:serviceaccount:default:alice",
    );
  });

  test("tokenFile is re-read when it changes (rotation mid-run)", async () => {
    const tokenPath = path.join(dir, "token");
    writeFileSync(tokenPath, await tokenFor("first"));
    const config = await loadClientConfig({
      kubeconfig: kubeconfig("tokenfile.kubeconfig", { tokenFile: tokenPath }),
    });
    const client = new KubeClient(config, { component: "config-test", maxRetries: 0 });
    const review = () =>
      client
        .request<{ status: { userInfo: { username: string } } }>({
          method: "POST",
          path: "/apis/authentication.k8s.io/v1/selfsubjectreviews",
          body: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
        })
        .then((r) => r.status.userInfo.username);
    try {
      assert.equal(await review(), "system:serviceaccount:default:first");
      writeFileSync(tokenPath, await tokenFor("second"));
      utimesSync(tokenPath, new Date(), new Date(Date.now() + 5000)); // a distinct mtime even within one clock tick
      assert.equal(await review(), "system:serviceaccount:default:second");
    } finally {
      client.close();
    }
  });

  test("exec plugin: cached until expirationTimestamp, re-run after expiry and on 401", async () => {
    const runs = path.join(dir, "exec-runs");
    const tokens = path.join(dir, "exec-tokens");
    // Each run takes the next token from the list; the plugin logs every run.
    writeFileSync(
      tokens,
      ["not-a-valid-token", await tokenFor("exec-a"), await tokenFor("exec-b")].join("\n"),
    );
    writeFileSync(runs, "");
    const plugin = path.join(dir, "plugin.sh");
    writeFileSync(
      plugin,
      `#!/bin/sh
n=$(wc -l < "${runs}"); echo run >> "${runs}"
token=$(sed -n "$((n + 1))p" "${tokens}")
expires=$(date -u -d "+$EXPIRES_IN seconds" +%Y-%m-%dT%H:%M:%SZ)
echo "$KUBERNETES_EXEC_INFO" > "${dir}/exec-info"
echo "$expires" > "${dir}/exec-expires"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}' "$token" "$expires"
`,
    );
    chmodSync(plugin, 0o755);
    const config = await loadClientConfig({
      kubeconfig: kubeconfig("exec.kubeconfig", {
        exec: {
          apiVersion: "client.authentication.k8s.io/v1",
          command: "./plugin.sh",
          // Long enough that the reuse below happens before expiry even on a loaded machine.
          env: [{ name: "EXPIRES_IN", value: "10" }],
          interactiveMode: "Never",
        },
      }),
    });
    const runCount = () => readFileSync(runs, "utf8").split("\n").filter(Boolean).length;
    // First run hands out a bad token: the 401 makes the client run the plugin again, once.
    assert.equal(await whoami(config), "system:serviceaccount:default:exec-a");
    assert.equal(runCount(), 2);
    assert.equal(JSON.parse(readFileSync(path.join(dir, "exec-info"), "utf8")).spec.interactive, false);
    assert.equal(await whoami(config), "system:serviceaccount:default:exec-a");
    assert.equal(runCount(), 2, "a credential that has not expired is reused");
    const expires = Date.parse(readFileSync(path.join(dir, "exec-expires"), "utf8").trim());
    await waitFor("the credential's expirationTimestamp to pass", () => Date.now() >= expires, 60_000, 100);
    assert.equal(await whoami(config), "system:serviceaccount:default:exec-b");
    assert.equal(runCount(), 3, "an expired credential is fetched again");
  });

  test("in-cluster: KUBERNETES_SERVICE_HOST/PORT with the service-account mount", async () => {
    const mount = mkdtempSync(path.join(dir, "sa-"));
    writeFileSync(path.join(mount, "token"), await tokenFor("in-cluster"));
    writeFileSync(path.join(mount, "ca.crt"), readFileSync(plane.caPath));
    writeFileSync(path.join(mount, "namespace"), "kube-system\n");
    const port = new URL(plane.server).port;
    const config = await loadClientConfig({
      env: { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: port },
      serviceAccountDir: mount,
    });
    assert.equal(config.namespace, "kube-system");
    assert.equal(await whoami(config), "system:serviceaccount:default:in-cluster");
    const v6 = await loadClientConfig({
      env: { KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443" },
      serviceAccountDir: mount,
    });
    assert.equal(v6.server, "https://[fd00::1]:443");
  });

  test("bad input fails with one clear ConfigError", async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ "auth-provider": { name: "oidc" } }, /authentication by "auth-provider" is not supported/],
      [{ username: "u", password: "p" }, /authentication by "username" is not supported/],
      [
        { exec: { apiVersion: "client.authentication.k8s.io/v1alpha1", command: "x" } },
        /exec apiVersion "client.authentication.k8s.io\/v1alpha1" is not supported/,
      ],
      [{ "client-certificate-data": "eA==" }, /needs both certificate and key/],
      [{ tokenFile: "/nonexistent/token" }, /cannot read token file \/nonexistent\/token/],
    ];
    for (const [user, message] of cases) {
      await assert.rejects(
        loadClientConfig({ kubeconfig: kubeconfig("bad.kubeconfig", user) }),
        (err) => err instanceof ConfigError && message.test(err.message),
      );
    }
    await assert.rejects(
      loadClientConfig({ kubeconfig: "/nonexistent/kubeconfig" }),
      (err) => err instanceof ConfigError && /cannot read kubeconfig/.test(err.message),
    );
    writeFileSync(path.join(dir, "garbage"), "clusters: [\n");
    await assert.rejects(
      loadClientConfig({ kubeconfig: path.join(dir, "garbage") }),
      (err) => err instanceof ConfigError && /not valid YAML/.test(err.message),
    );
    await assert.rejects(
      loadClientConfig({ env: { KUBERNETES_SERVICE_HOST: "10.96.0.1" }, serviceAccountDir: "/nonexistent" }),
      ConfigError,
    );
  });
});
