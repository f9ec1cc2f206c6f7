// The image writer, read back with GNU tar: index → manifest → config → layer agree, the layer holds exactly the
// files given with their modes and owners, and the same inputs give the same bytes.
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { run } from "../../localcluster/exec.ts";
import {
  readImageTarball,
  writeImageTarball,
  type ImageContents,
  type ImageSpec,
  type LayerEntry,
} from "../../localcluster/oci-image.ts";

describe("writeImageTarball", () => {
  let temp: string;
  let spec: ImageSpec;
  let image: ImageContents;
  let digest: string;
  const longName = `/app/${"deep/".repeat(30)}file.txt`;

  before(async () => {
    temp = mkdtempSync(path.join(os.tmpdir(), "local-ccm-oci-image-"));
    const tool = path.join(temp, "tool");
    writeFileSync(tool, "#!/bin/sh\necho hi\n");
    chmodSync(tool, 0o755);
    spec = {
      reference: "registry.test/team/thing:1.2.3",
      files: [
        { path: "/usr/bin/tool", source: tool },
        { path: "/etc/passwd", content: "root:x:0:0::/root:/sbin/nologin\n" },
        { path: "/lib64/ld.so", symlink: "/lib/ld.so" },
        { path: "/tmp", directory: true, mode: 0o1777 },
        { path: "/home/nonroot", directory: true, mode: 0o700, uid: 65532, gid: 65532 },
        { path: "/app/data.bin", content: Buffer.alloc(1500, 7), mode: 0o600, uid: 65532, gid: 65532 },
        { path: longName, content: "long\n" },
      ],
      config: { Entrypoint: ["/usr/bin/tool"], User: "65532:65532", Env: ["A=b"], WorkingDir: "/app" },
    };
    ({ digest } = await writeImageTarball(spec, path.join(temp, "image.tar")));
    image = await readImageTarball(path.join(temp, "image.tar"), mkdtempSync(path.join(temp, "read-")));
  });

  after(() => rmSync(temp, { recursive: true, force: true }));

  test("index, manifest, config and layer agree; the reader checked every blob's digest", () => {
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(image.digest, digest);
    assert.deepEqual(image.config.config, spec.config);
    assert.equal(image.config.os, "linux");
    assert.equal(image.config.architecture, "amd64");
  });

  test("containerd, OCI tools and Docker all find the reference", () => {
    assert.deepEqual(image.names, {
      containerd: "registry.test/team/thing:1.2.3",
      ociRefName: "1.2.3",
      docker: ["registry.test/team/thing:1.2.3"],
    });
  });

  test("the layer holds the files given, every parent folder first, with the modes and owners given", () => {
    const byPath = new Map(image.entries.map((entry) => [entry.path, entry]));
    assert.deepEqual(
      image.entries.map((entry) => entry.path),
      [
        "/app",
        ...longName
          .split("/")
          .slice(2)
          .map((_, i, parts) => `/app/${parts.slice(0, i + 1).join("/")}`),
        "/app/data.bin",
        "/etc",
        "/etc/passwd",
        "/home",
        "/home/nonroot",
        "/lib64",
        "/lib64/ld.so",
        "/tmp",
        "/usr",
        "/usr/bin",
        "/usr/bin/tool",
      ].sort(),
    );
    const root = { uid: 0, gid: 0 };
    const nonroot = { uid: 65532, gid: 65532 };
    const expected: LayerEntry[] = [
      { path: "/usr/bin/tool", type: "file", mode: 0o755, ...root, size: 18 },
      { path: "/app/data.bin", type: "file", mode: 0o600, ...nonroot, size: 1500 },
      { path: "/etc/passwd", type: "file", mode: 0o644, ...root, size: 32 },
      { path: "/lib64/ld.so", type: "symlink", mode: 0o777, ...root, size: 0, symlink: "/lib/ld.so" },
      { path: "/tmp", type: "directory", mode: 0o1777, ...root, size: 0 },
      { path: "/home/nonroot", type: "directory", mode: 0o700, ...nonroot, size: 0 },
    ];
    for (const entry of expected) assert.deepEqual(byPath.get(entry.path), entry);
    for (const parent of ["/app", "/etc", "/home", "/lib64", "/usr", "/usr/bin"]) {
      assert.deepEqual(byPath.get(parent), { path: parent, type: "directory", mode: 0o755, uid: 0, gid: 0, size: 0 });
    }
  });

  test("the layer's bytes are the files' bytes", async () => {
    const rootfs = mkdtempSync(path.join(temp, "rootfs-"));
    await run("tar", ["-xf", image.layer, "-C", rootfs]);
    assert.equal(readFileSync(path.join(rootfs, "usr/bin/tool"), "utf8"), "#!/bin/sh\necho hi\n");
    assert.deepEqual(readFileSync(path.join(rootfs, "app/data.bin")), Buffer.alloc(1500, 7));
    assert.equal(readFileSync(path.join(rootfs, longName), "utf8"), "long\n");
    assert.equal(readlinkSync(path.join(rootfs, "lib64/ld.so")), "/lib/ld.so");
  });

  test("the same inputs give the same bytes, whatever order the files come in", async () => {
    const again = path.join(temp, "again.tar");
    const result = await writeImageTarball({ ...spec, files: [...spec.files].reverse() }, again);
    assert.equal(result.digest, digest);
    assert.deepEqual(readFileSync(again), readFileSync(path.join(temp, "image.tar")));
  });

  test("another file's content gives another digest", async () => {
    const files = spec.files.map((file) => (file.path === "/etc/passwd" ? { ...file, content: "other\n" } : file));
    const result = await writeImageTarball({ ...spec, files }, path.join(temp, "other.tar"));
    assert.notEqual(result.digest, digest);
  });

  test("bad specs are refused with the path at fault", async () => {
    const out = path.join(temp, "bad.tar");
    const bad = (files: ImageSpec["files"], reference = spec.reference) =>
      writeImageTarball({ ...spec, reference, files }, out);
    await assert.rejects(bad([{ path: "relative", content: "" }]), /absolute and normalised: relative/);
    await assert.rejects(bad([{ path: "/a/../b", content: "" }]), /absolute and normalised/);
    await assert.rejects(bad([{ path: "/a", content: "", symlink: "/b" }]), /\/a: give exactly one/);
    await assert.rejects(bad([{ path: "/a" }]), /\/a: give exactly one/);
    await assert.rejects(bad([{ path: "/a", content: "" }, { path: "/a", content: "" }]), /given twice: \/a/);
    await assert.rejects(bad([{ path: "/a", content: "" }, { path: "/a/b", content: "" }]), /\/a is not a folder/);
    await assert.rejects(bad([], "thing:latest"), /registry\/name:tag: thing:latest/);
    await assert.rejects(bad([{ path: "/a", source: temp }]), /is not a file/);
  });
});
