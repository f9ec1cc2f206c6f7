// A tiny program on runMain for main.test.ts: --mode picks how it ends.
import { ConfigError } from "../kube/config.ts";
import { flag, parseFlags } from "./flags.ts";
import { runMain } from "./main.ts";

const fixtureFlags = [
  flag({ name: "mode", type: "string", default: "ok", help: "How to end." }),
  flag({ name: "v", type: "int", default: "0", help: "Verbosity." }),
] as const;

const print = (text: string): void => {
  process.stdout.write(`${text}\n`);
};
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

runMain("fixture", async (ctx) => {
  const { values } = parseFlags(fixtureFlags, ctx.argv, ctx.env);
  ctx.setVerbosity(values.v);
  // Two hooks that add up; each is async and awaited before the next.
  ctx.onShutdown(async () => {
    await pause(10);
    print("hook 1 ran");
  });
  ctx.onShutdown(async () => {
    await pause(10);
    print(`hook 2 ran (stopped: ${ctx.signal.aborted})`);
  });
  switch (values.mode) {
    case "ok":
      print("done");
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
        throw new Error("events not flushed"); // runs second: not the one reported
      });
      ctx.onShutdown(() => {
        throw new Error("lease release failed");
      });
      return;
    case "wait":
      setInterval(() => {}, 60_000); // runs until a signal
      print("ready");
      await ctx.untilStopped();
      ctx.onShutdown(() => print("hook added during shutdown ran"));
      return;
    case "wait-for": {
      setInterval(() => {}, 60_000);
      const quick = await ctx.unlessStopped(pause(1));
      print(`ready (quick work done: ${quick})`);
      const endless = await ctx.unlessStopped(new Promise(() => {}));
      print(`endless work done: ${endless}`);
      return;
    }
    case "stuck":
      setInterval(() => {}, 60_000);
      ctx.onShutdown(async () => {
        print("stopping");
        await new Promise(() => {}); // never ends: only a second signal leaves
      });
      print("ready");
      return ctx.untilStopped();
  }
});
