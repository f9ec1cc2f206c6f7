// Writes a single-layer container image as one tarball that both `ctr images import` (containerd 1.6) and
// `docker load` accept: an OCI image layout (oci-layout, index.json, blobs/sha256/…) that also holds Docker's
// manifest.json with RepoTags — the combined form `docker save` writes since Docker 25.
// Reproducible: the same files give the same bytes and so the same digest. Entries are sorted, every mtime is 0,
// owners are 0:0 unless a file says otherwise, parent folders are written explicitly, and the layer is stored
// uncompressed (a gzip stream's bytes depend on the zlib version; registries compress on push).
// The tar format is written here (ustar headers: regular files, folders, symlinks) rather than with tar-stream,
// whose v3 brings twelve more packages (streamx, bare-fs, bare-url, …) for what is one header layout.
import { createHash, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { open, readFile, rename, rm, stat, type FileHandle } from "node:fs/promises";
import path from "node:path";
import { run } from "./exec.ts";

export interface ImageFile {
  /** Absolute path in the image. */
  path: string;
  /** Exactly one of these four: a host file to copy, the content itself, a symlink's target, or a folder. */
  source?: string;
  content?: string | Buffer;
  symlink?: string;
  directory?: true;
  /** Permission bits; default 0755 for folders and for sources executable by their owner, else 0644. */
  mode?: number;
  uid?: number;
  gid?: number;
}

/** The image config's runtime part (the OCI image config's `config` object). */
export interface ImageConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  User?: string;
  Env?: string[];
  WorkingDir?: string;
}

export interface ImageSpec {
  /** A full reference with a tag, e.g. ghcr.io/local-ccm/local-ccm:0.1.0: the name both loaders give the image. */
  reference: string;
  files: ImageFile[];
  config: ImageConfig;
  /** GOARCH-style architecture of the files; default: this machine's. */
  architecture?: string;
}

export const MEDIA_TYPES = {
  index: "application/vnd.oci.image.index.v1+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  config: "application/vnd.oci.image.config.v1+json",
  layer: "application/vnd.oci.image.layer.v1.tar",
} as const;

const BLOCK = 512;
const EPOCH = "1970-01-01T00:00:00Z";
const ARCHITECTURES: Partial<Record<NodeJS.Architecture, string>> = { x64: "amd64", arm64: "arm64", arm: "arm" };

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

/** Writes the image tarball to `out` (atomically) and returns its manifest digest (sha256:…). */
export async function writeImageTarball(spec: ImageSpec, out: string): Promise<{ digest: string }> {
  const tag = referenceTag(spec.reference);
  // Per process: concurrent builds of the same tarball each write their own (image.ts).
  const layerFile = `${out}.${process.pid}.layer.tmp`;
  const partial = `${out}.${process.pid}.tmp`;
  try {
    const layer = await writeTar(layerFile, await layerEntries(spec.files));
    const config = jsonBlob(MEDIA_TYPES.config, {
      architecture: spec.architecture ?? ARCHITECTURES[process.arch] ?? process.arch,
      os: "linux",
      created: EPOCH,
      config: spec.config,
      rootfs: { type: "layers", diff_ids: [layer.digest] },
      history: [{ created: EPOCH, created_by: "localcluster/oci-image.ts" }],
    });
    const manifest = jsonBlob(MEDIA_TYPES.manifest, {
      schemaVersion: 2,
      mediaType: MEDIA_TYPES.manifest,
      config: config.descriptor,
      layers: [{ mediaType: MEDIA_TYPES.layer, digest: layer.digest, size: layer.size }],
    });
    // containerd names the image after io.containerd.image.name; ref.name carries the tag as `docker save`
    // writes it; Docker reads manifest.json.
    const index = {
      schemaVersion: 2,
      mediaType: MEDIA_TYPES.index,
      manifests: [
        {
          ...manifest.descriptor,
          annotations: { "io.containerd.image.name": spec.reference, "org.opencontainers.image.ref.name": tag },
        },
      ],
    };
    const dockerManifest = [
      { Config: blobPath(config.descriptor.digest), RepoTags: [spec.reference], Layers: [blobPath(layer.digest)] },
    ];
    await writeTar(partial, [
      folderEntry("blobs/"),
      folderEntry("blobs/sha256/"),
      ...[
        { digest: layer.digest, body: { file: layerFile, size: layer.size } },
        { digest: config.descriptor.digest, body: config.bytes },
        { digest: manifest.descriptor.digest, body: manifest.bytes },
      ]
        .sort((a, b) => compare(a.digest, b.digest))
        .map(({ digest, body }) => fileEntry(blobPath(digest), body)),
      fileEntry("index.json", jsonBytes(index)),
      fileEntry("manifest.json", jsonBytes(dockerManifest)),
      fileEntry("oci-layout", jsonBytes({ imageLayoutVersion: "1.0.0" })),
    ]);
    await rename(partial, out);
    return { digest: manifest.descriptor.digest };
  } finally {
    await rm(layerFile, { force: true });
    await rm(partial, { force: true });
  }
}

/** The tag of a reference like registry/name:tag (digests are not names a loader can give). */
function referenceTag(reference: string): string {
  const match = /^[a-z0-9.-]+(?::[0-9]+)?\/[a-z0-9._/-]+:([\w][\w.-]{0,127})$/.exec(reference);
  if (!match) throw new Error(`image reference must be registry/name:tag: ${reference}`);
  return match[1] as string;
}

function blobPath(digest: string): string {
  return `blobs/sha256/${digest.slice("sha256:".length)}`;
}

function sha256(bytes: Buffer): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

function jsonBytes(value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value));
}

function jsonBlob(mediaType: string, value: unknown): { descriptor: Descriptor; bytes: Buffer } {
  const bytes = jsonBytes(value);
  return { descriptor: { mediaType, digest: sha256(bytes), size: bytes.length }, bytes };
}

// ---- the tar format -------------------------------------------------------------------------------------------

type Body = Buffer | { file: string; size: number };

interface TarEntry {
  /** Relative name; folders end with "/". */
  name: string;
  type: "file" | "directory" | "symlink";
  mode: number;
  uid: number;
  gid: number;
  linkname?: string;
  body?: Body;
}

function folderEntry(name: string, mode = 0o755, uid = 0, gid = 0): TarEntry {
  return { name, type: "directory", mode, uid, gid };
}

function fileEntry(name: string, body: Body, mode = 0o644, uid = 0, gid = 0): TarEntry {
  return { name, type: "file", mode, uid, gid, body };
}

/** The layer's entries: the given files and every parent folder, sorted so each folder precedes its contents. */
async function layerEntries(files: ImageFile[]): Promise<TarEntry[]> {
  const entries = new Map<string, TarEntry>();
  for (const file of files) {
    const parts = imagePathParts(file.path);
    const key = parts.join("/");
    const existing = entries.get(key);
    if (existing && !(existing.type === "directory" && file.directory)) {
      throw new Error(`image path given twice: ${file.path}`);
    }
    entries.set(key, await layerEntry(file, key));
    for (let depth = 1; depth < parts.length; depth++) {
      const parent = parts.slice(0, depth).join("/");
      const entry = entries.get(parent);
      if (entry && entry.type !== "directory") throw new Error(`${file.path}: /${parent} is not a folder`);
      if (!entry) entries.set(parent, folderEntry(`${parent}/`));
    }
  }
  return [...entries.keys()].sort(comparePaths).map((key) => entries.get(key) as TarEntry);
}

function imagePathParts(imagePath: string): string[] {
  const parts = imagePath.split("/").slice(1);
  if (!imagePath.startsWith("/") || parts.some((part) => part === "" || part === "." || part === "..")) {
    throw new Error(`image path must be absolute and normalised: ${imagePath}`);
  }
  return parts;
}

async function layerEntry(file: ImageFile, name: string): Promise<TarEntry> {
  const kinds = [file.source, file.content, file.symlink, file.directory].filter((kind) => kind !== undefined);
  if (kinds.length !== 1) throw new Error(`${file.path}: give exactly one of source, content, symlink, directory`);
  const owner = { uid: file.uid ?? 0, gid: file.gid ?? 0 };
  if (file.directory) return folderEntry(`${name}/`, file.mode ?? 0o755, owner.uid, owner.gid);
  if (file.symlink !== undefined) {
    return { name, type: "symlink", mode: file.mode ?? 0o777, ...owner, linkname: file.symlink };
  }
  if (file.content !== undefined) {
    return fileEntry(name, Buffer.from(file.content), file.mode ?? 0o644, owner.uid, owner.gid);
  }
  const source = await stat(file.source as string);
  if (!source.isFile()) throw new Error(`${file.path}: ${file.source} is not a file`);
  const mode = file.mode ?? (source.mode & 0o100 ? 0o755 : 0o644);
  return fileEntry(name, { file: file.source as string, size: source.size }, mode, owner.uid, owner.gid);
}

/** Component-wise order: a folder sorts right before its own contents. */
function comparePaths(a: string, b: string): number {
  const left = a.split("/");
  const right = b.split("/");
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const order = compare(left[i] as string, right[i] as string);
    if (order !== 0) return order;
  }
  return left.length - right.length;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Writes a tar archive and returns the sha256 digest and size of its bytes. */
async function writeTar(out: string, entries: TarEntry[]): Promise<{ digest: string; size: number }> {
  const handle = await open(out, "w");
  const writer = { handle, hash: createHash("sha256"), size: 0 };
  try {
    for (const entry of entries) {
      await write(writer, tarHeader(entry));
      const size = bodySize(entry.body);
      if (Buffer.isBuffer(entry.body)) await write(writer, entry.body);
      else if (entry.body) await copyFile(writer, entry.body);
      await write(writer, Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK));
    }
    await write(writer, Buffer.alloc(2 * BLOCK));
  } finally {
    await handle.close();
  }
  return { digest: `sha256:${writer.hash.digest("hex")}`, size: writer.size };
}

interface Writer {
  handle: FileHandle;
  hash: Hash;
  size: number;
}

async function write(writer: Writer, bytes: Buffer): Promise<void> {
  writer.hash.update(bytes);
  writer.size += bytes.length;
  let offset = 0;
  while (offset < bytes.length) offset += (await writer.handle.write(bytes, offset)).bytesWritten;
}

async function copyFile(writer: Writer, body: { file: string; size: number }): Promise<void> {
  let copied = 0;
  for await (const chunk of createReadStream(body.file) as AsyncIterable<Buffer>) {
    copied += chunk.length;
    if (copied > body.size) break;
    await write(writer, chunk);
  }
  if (copied !== body.size) throw new Error(`${body.file} changed size while it was copied`);
}

function bodySize(body: Body | undefined): number {
  if (body === undefined) return 0;
  return Buffer.isBuffer(body) ? body.length : body.size;
}

const TYPE_FLAGS = { file: "0", directory: "5", symlink: "2" } as const;

/** A POSIX ustar header; names longer than 100 bytes are split at a "/" into prefix and name. */
function tarHeader(entry: TarEntry): Buffer {
  const header = Buffer.alloc(BLOCK);
  const [prefix, name] = splitName(entry.name);
  const linkname = entry.linkname ?? "";
  if (Buffer.byteLength(linkname) > 100) throw new Error(`symlink target longer than 100 bytes: ${linkname}`);
  header.write(name, 0, 100);
  octal(header, 100, 8, entry.mode);
  octal(header, 108, 8, entry.uid);
  octal(header, 116, 8, entry.gid);
  octal(header, 124, 12, bodySize(entry.body));
  octal(header, 136, 12, 0); // mtime
  header.write("        ", 148, 8); // the checksum counts its own field as spaces
  header.write(TYPE_FLAGS[entry.type], 156, 1);
  header.write(linkname, 157, 100);
  header.write("ustar\u000000", 257, 8);
  octal(header, 329, 8, 0); // devmajor
  octal(header, 337, 8, 0); // devminor
  header.write(prefix, 345, 155);
  const checksum = header.reduce((sum, byte) => sum + byte, 0);
  header.write(`${checksum.toString(8).padStart(6, "0")}\u0000 `, 148, 8);
  return header;
}

function octal(header: Buffer, offset: number, width: number, value: number): void {
  const digits = value.toString(8).padStart(width - 1, "0");
  if (digits.length > width - 1) throw new Error(`tar field overflow: ${value}`);
  header.write(`${digits}\u0000`, offset, width);
}

function splitName(name: string): [prefix: string, name: string] {
  if (Buffer.byteLength(name) <= 100) return ["", name];
  // The split "/" belongs to neither field; a folder's trailing "/" stays in the name.
  for (let slash = name.indexOf("/"); slash !== -1; slash = name.indexOf("/", slash + 1)) {
    const prefix = name.slice(0, slash);
    const rest = name.slice(slash + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(rest) <= 100 && rest !== "" && rest !== "/") {
      return [prefix, rest];
    }
  }
  throw new Error(`path too long for a ustar header: ${name}`);
}

// ---- reading an image back (tests, tooling): with GNU tar, a reader independent of the writer above ---------

export interface LayerEntry {
  /** Absolute path in the image. */
  path: string;
  type: "file" | "directory" | "symlink";
  mode: number;
  uid: number;
  gid: number;
  size: number;
  symlink?: string;
}

export interface ImageContents {
  /** The names each loader gives the image: containerd's annotation, the OCI ref.name, Docker's RepoTags. */
  names: { containerd: string; ociRefName: string; docker: string[] };
  digest: string;
  config: { architecture: string; os: string; config: ImageConfig; rootfs: { diff_ids: string[] } };
  /** The extracted layer tarball. */
  layer: string;
  entries: LayerEntry[];
}

/**
 * Extracts an image tarball into `into` and reads it the way a loader does, checking that every blob's bytes hash
 * to its name and size, and that index → manifest → config → layer agree with each other and with manifest.json.
 */
export async function readImageTarball(tarball: string, into: string): Promise<ImageContents> {
  await run("tar", ["-xf", tarball, "-C", into]);
  const layout = JSON.parse(await readFile(path.join(into, "oci-layout"), "utf8")) as { imageLayoutVersion: string };
  if (layout.imageLayoutVersion !== "1.0.0") throw new Error(`oci-layout: ${JSON.stringify(layout)}`);
  const index = JSON.parse(await readFile(path.join(into, "index.json"), "utf8")) as {
    manifests: (Descriptor & { annotations: Record<string, string> })[];
  };
  if (index.manifests.length !== 1) throw new Error(`index.json holds ${index.manifests.length} manifests`);
  const [top] = index.manifests as [Descriptor & { annotations: Record<string, string> }];
  const manifest = JSON.parse(await readBlob(into, top, MEDIA_TYPES.manifest)) as {
    config: Descriptor;
    layers: Descriptor[];
  };
  const config = JSON.parse(await readBlob(into, manifest.config, MEDIA_TYPES.config)) as ImageContents["config"];
  if (manifest.layers.length !== 1) throw new Error(`the manifest lists ${manifest.layers.length} layers`);
  const [layerDescriptor] = manifest.layers as [Descriptor];
  await readBlob(into, layerDescriptor, MEDIA_TYPES.layer);
  if (JSON.stringify(config.rootfs.diff_ids) !== JSON.stringify([layerDescriptor.digest])) {
    throw new Error(`config diff_ids ${config.rootfs.diff_ids} are not the layer ${layerDescriptor.digest}`);
  }
  const [docker, ...more] = JSON.parse(await readFile(path.join(into, "manifest.json"), "utf8")) as {
    Config: string;
    RepoTags: string[];
    Layers: string[];
  }[];
  if (!docker || more.length > 0) throw new Error("manifest.json must describe exactly one image");
  const layer = path.join(into, blobPath(layerDescriptor.digest));
  if (docker.Config !== blobPath(manifest.config.digest) || docker.Layers.join() !== blobPath(layerDescriptor.digest)) {
    throw new Error(`manifest.json does not name the OCI manifest's blobs: ${JSON.stringify(docker)}`);
  }
  const names = {
    containerd: top.annotations["io.containerd.image.name"] ?? "",
    ociRefName: top.annotations["org.opencontainers.image.ref.name"] ?? "",
    docker: docker.RepoTags,
  };
  return { names, digest: top.digest, config, layer, entries: await listTar(layer) };
}

async function readBlob(dir: string, descriptor: Descriptor, mediaType: string): Promise<string> {
  if (descriptor.mediaType !== mediaType) throw new Error(`${descriptor.digest} is ${descriptor.mediaType}`);
  const file = path.join(dir, blobPath(descriptor.digest));
  const hash = createHash("sha256");
  let size = 0;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    size += chunk.length;
  }
  if (`sha256:${hash.digest("hex")}` !== descriptor.digest || size !== descriptor.size) {
    throw new Error(`blob ${descriptor.digest} does not match its descriptor`);
  }
  return mediaType === MEDIA_TYPES.layer ? "" : readFile(file, "utf8");
}

const LISTING = /^([-dl])([-rwxsStT]{9}) (\d+)\/(\d+) +(\d+) \S+ \S+ (.+?)(?: -> (.+))?$/;

type ListingFields = [string, string, string, string, string, string, string, string | undefined];

/** A layer's entries as GNU tar lists them (numeric owners), in archive order. */
async function listTar(tarball: string): Promise<LayerEntry[]> {
  const listing = await run("tar", ["--numeric-owner", "-tvf", tarball]);
  return listing
    .trimEnd()
    .split("\n")
    .map((line) => {
      const match = LISTING.exec(line);
      if (!match) throw new Error(`unexpected tar listing line: ${line}`);
      const [, kind, permissions, uid, gid, size, name, target] = match as unknown as ListingFields;
      const type = kind === "d" ? "directory" : kind === "l" ? "symlink" : "file";
      const owner = { uid: Number(uid), gid: Number(gid) };
      const entry = { path: `/${name.replace(/\/$/, "")}`, type, ...owner, size: Number(size) };
      return { ...entry, mode: permissionBits(permissions), ...(target ? { symlink: target } : {}) };
    }) as LayerEntry[];
}

/** "rwxr-sr-t" → 0o3755. */
function permissionBits(permissions: string): number {
  let mode = 0;
  for (let i = 0; i < 9; i++) {
    const char = permissions[i] as string;
    if (char !== "-" && char !== "S" && char !== "T") mode |= 1 << (8 - i);
  }
  if (/[sS]/.test(permissions[2] as string)) mode |= 0o4000;
  if (/[sS]/.test(permissions[5] as string)) mode |= 0o2000;
  if (/[tT]/.test(permissions[8] as string)) mode |= 0o1000;
  return mode;
}
