// `npm run image`: the product image as a tarball (localcluster/image.ts builds it).
import path from "node:path";
import { buildImage } from "../localcluster/image.ts";

const { tarball, reference, digest } = await buildImage();
console.log(`${path.relative(process.cwd(), tarball)}: ${reference} ${digest}`);
console.log(`load it with: ctr -n k8s.io images import ${tarball}   or: docker load -i ${tarball}`);
