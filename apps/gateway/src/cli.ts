#!/usr/bin/env node
import { runCli } from "./cli/main";

process.exitCode = await runCli(process.argv.slice(2));
