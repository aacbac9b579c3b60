import { optionText } from './args.js';
import { ApiClient } from './client.js';
import { loadConfig, selectProject } from './config.js';

/** The client for the project named with --project, else the default project. */
export function connect(): ApiClient {
  return new ApiClient(selectProject(loadConfig(), optionText(['project'])));
}

/** ` --project NAME` when the user chose a project, for commands suggested in messages. */
export function projectFlag(): string {
  const name = optionText(['project']);
  return name === undefined ? '' : ` --project ${name}`;
}
