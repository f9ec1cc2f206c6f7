// Lint: typescript-eslint's recommended rules over everything we write (pure JS tooling, so
// `npm ci` needs no per-platform binaries).
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["node_modules/", "dist/", ".cache/", ".controlplane/", ".cluster/", "native/icmp/build/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: "readonly", console: "readonly", Buffer: "readonly", setTimeout: "readonly", clearTimeout: "readonly", setInterval: "readonly", clearInterval: "readonly", URL: "readonly", AbortController: "readonly", AbortSignal: "readonly", fetch: "readonly", NodeJS: "readonly", performance: "readonly", queueMicrotask: "readonly", TextDecoder: "readonly", TextEncoder: "readonly" } },
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      eqeqeq: ["error", "always"],
      "no-console": "off",
    },
  },
  // The LoadBalancer modes share src/loadbalancer/ and never reach into each other's folder; the layer they share
  // sits below them all (docs/architecture.md).
  ...[
    ["src/loadbalancer", ["service", "pools"]],
    ["src/service", ["pools"]],
    ["src/pools", ["service"]],
  ].map(([folder, others]) => ({
    files: [`${folder}/**/*.ts`],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: others.map((other) => ({
            group: [`../${other}/*`, `**/src/${other}/*`],
            message: `${folder} does not import src/${other}: what LoadBalancer modes share lives in src/loadbalancer.`,
          })),
        },
      ],
    },
  })),
);
