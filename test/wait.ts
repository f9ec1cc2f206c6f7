// Tests import waitFor from here; it lives in localcluster/ because the demo and benchmarks poll too.
export { waitFor } from "../localcluster/wait.ts";
