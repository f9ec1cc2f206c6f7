#!/usr/bin/env node
// node-lifecycle-controller: hosts the central controllers (Deployment). See src/manager/program.ts.
// `node-lifecycle-controller release-all [flags]`: the chart's post-delete hook (src/manager/releaseall.ts).
import { runMain } from "../cli/main.ts";
import { PROGRAM } from "../manager/flags.ts";
import { runManager } from "../manager/program.ts";
import { RELEASE_ALL, RELEASE_ALL_HELP, runReleaseAll } from "../manager/releaseall.ts";

runMain(
  PROGRAM,
  (ctx) => (ctx.argv[0] === RELEASE_ALL ? runReleaseAll({ ...ctx, argv: ctx.argv.slice(1) }) : runManager(ctx)),
  [{ name: RELEASE_ALL, help: RELEASE_ALL_HELP }],
);
