#!/usr/bin/env node
import { cac } from 'cac';
import { registerAgent } from './commands/agent.js';
import { registerGpucloudEmulator } from './commands/gpucloud-emulator.js';
import { registerServer } from './commands/server.js';

const cli = cac('orchestrator');
registerServer(cli);
registerAgent(cli);
registerGpucloudEmulator(cli);
cli.help();
cli.parse();
