#!/usr/bin/env node
// node-lifecycle-controller: hosts the central controllers (Deployment). See src/manager/program.ts.
import { runMain } from "../cli/main.ts";
import { PROGRAM } from "../manager/flags.ts";
import { runManager } from "../manager/program.ts";

runMain(PROGRAM, runManager);
