#!/usr/bin/env node
// local-ccm: the node agent (DaemonSet). See src/agent/run.ts.
import { PROGRAM } from "../agent/flags.ts";
import { runAgent } from "../agent/run.ts";
import { runMain } from "../cli/main.ts";

runMain(PROGRAM, runAgent);
