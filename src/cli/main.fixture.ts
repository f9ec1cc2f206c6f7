// A tiny program on runMain for main.test.ts: --mode picks how it ends.
import { ConfigError } from "../kube/config.ts";
import { flag, parseFlags } from "./flags.ts";
import { runMain } from "./main.ts";

const fixtureFlags = [
  flag({ name: "mode", type: "string", default: "ok", help: "How to end." }),
  flag({ name: "v", type: "int", default: "0", help: "Verbosity." }),
] as const;

runMain("fixture", async (ctx) => {
  const { values } = parseFlags(fixtureFlags, ctx.argv, ctx.env);
  ctx.setVerbosity(values.v);
  ctx.onShutdown(async () => {
    await new Promise((resolve) => setTimeout(resolve, 10)); // an async hook is awaited
    process.stdout.write("hook ran\n");
  });
  switch (values.mode) {
    case "ok":
      process.stdout.write("done\n");
      return;
    case "config":
      throw new ConfigError("cannot read kubeconfig /nope: ENOENT");
    case "crash":
      throw new Error("node n1 not found\n  second line");
    case "uncaught":
      setTimeout(() => {
        throw new Error("late failure");
      }, 0);
      return new Promise(() => {});
    case "hook-fails":
      ctx.onShutdown(() => {
        throw new Error("lease release failed");
      });
      return;
    case "wait":
      setInterval(() => {}, 60_000); // runs until a signal
      process.stdout.write("ready\n");
      return new Promise(() => {});
  }
});
