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

/**
 * Like connect(), but --project may also name a project of the default project's server that this client has not
 * added (an admin looking at another project's costs or budget); the server checks that the caller may.
 */
export function connectOnServer(): ApiClient {
  const config = loadConfig();
  const name = optionText(['project']);
  if (name === undefined || config.projects.some((p) => p.name === name)) return new ApiClient(selectProject(config, name));
  return new ApiClient({ ...selectProject(config, undefined), name });
}
