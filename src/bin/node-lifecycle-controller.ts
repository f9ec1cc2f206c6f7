#!/usr/bin/env node
// node-lifecycle-controller: deletes Nodes of machines that are gone (Deployment). See src/lifecycle/run.ts.
import { runMain } from "../cli/main.ts";
import { PROGRAM } from "../lifecycle/flags.ts";
import { runLifecycleController } from "../lifecycle/run.ts";

runMain(PROGRAM, runLifecycleController);
