import { Type, type Static } from '@sinclair/typebox';

const Port = Type.Integer({ minimum: 1, maximum: 65535 });
const User = Type.String({ minLength: 1, pattern: '^[A-Za-z0-9._][A-Za-z0-9._-]*$', 'x-expected': 'a user name such as ubuntu' });
const Hostname = Type.String({ minLength: 1, pattern: '^[A-Za-z0-9._:\\[\\]-]+$', 'x-expected': 'a host name or IP address such as 10.0.0.5' });
const IdentityFile = Type.String({ minLength: 1, description: 'A private key file on the machine the server runs on; ~ is its user\'s home' });

/** The host the server goes through to reach hosts it cannot reach directly (OpenSSH's ProxyJump). */
export const SshProxyJump = Type.Object({
  hostname: Hostname,
  user: Type.Optional(User),
  port: Type.Optional(Port),
  identity_file: Type.Optional(IdentityFile),
}, { additionalProperties: false, description: 'A head node the server connects through' });
export type SshProxyJump = Static<typeof SshProxyJump>;

export const SshHostParams = Type.Object({
  hostname: Hostname,
  port: Type.Optional(Port),
  user: Type.Optional(User),
  identity_file: Type.Optional(IdentityFile),
  proxy_jump: Type.Optional(SshProxyJump),
  internal_ip: Type.Optional(Type.String({ minLength: 1, description: 'The address other hosts of the fleet reach this one at (multi-node tasks)' })),
  blocks: Type.Optional(Type.Union([Type.Literal('auto'), Type.Integer({ minimum: 1 })], { 'x-expected': 'auto or a number of blocks such as 4' })),
}, { additionalProperties: false });
export type SshHostParams = Static<typeof SshHostParams>;

/** dstack's `ssh_config` of a fleet: machines of one's own, reached over SSH, are the fleet's instances. */
export const SshConfig = Type.Object({
  user: Type.Optional(User),
  port: Type.Optional(Port),
  identity_file: Type.Optional(IdentityFile),
  proxy_jump: Type.Optional(SshProxyJump),
  hosts: Type.Array(Type.Union([Hostname, SshHostParams]), { minItems: 1, description: 'The machines: a host name, or its parameters' }),
  network: Type.Optional(Type.String({ pattern: '^[0-9a-fA-F.:]+/\\d{1,3}$', 'x-expected': 'a network such as 10.0.0.0/24', description: 'The network whose address of each host other hosts reach it at' })),
}, { additionalProperties: false, description: 'Hosts of your own that the server installs its agent on over SSH' });
export type SshConfig = Static<typeof SshConfig>;

/** One SSH endpoint with everything needed to log in. */
export interface SshEndpoint {
  hostname: string;
  port: number;
  user: string;
  identityFile: string;
}

/** One host of an SSH fleet, with the fleet's defaults filled in. `name` tells it from the fleet's other hosts. */
export interface SshHost extends SshEndpoint {
  name: string;
  proxyJump: SshEndpoint | null;
  internalIp: string | null;
  /** The fleet's `network`: where the internal address is taken from when internal_ip is not given. */
  network: string | null;
}

export const DEFAULT_SSH_PORT = 22;
export const DEFAULT_SSH_USER = 'root';
export const DEFAULT_IDENTITY_FILE = '~/.ssh/id_rsa';

/** `10.0.0.5`, or `10.0.0.5:2222` where the port is not 22. */
export function sshHostName(hostname: string, port: number): string {
  return port === DEFAULT_SSH_PORT ? hostname : `${hostname}:${port}`;
}

/** `host:port`: how a host key is recorded and shown. */
export function sshAddress(endpoint: Pick<SshEndpoint, 'hostname' | 'port'>): string {
  return `${endpoint.hostname}:${endpoint.port}`;
}

/** The addresses whose host keys a fleet keeps: its hosts' and their head nodes'. */
export function sshFleetAddresses(config: SshConfig): string[] {
  return sshHosts(config).flatMap((host) => [sshAddress(host), ...(host.proxyJump ? [sshAddress(host.proxyJump)] : [])]);
}

/** The fleet's hosts as the server connects to them: each host's own settings, else the fleet's, else SSH's defaults. */
export function sshHosts(config: SshConfig): SshHost[] {
  return config.hosts.map((entry) => {
    const host = typeof entry === 'string' ? { hostname: entry } : entry;
    const port = host.port ?? config.port ?? DEFAULT_SSH_PORT;
    const jump = host.proxy_jump ?? config.proxy_jump;
    return {
      name: sshHostName(host.hostname, port),
      hostname: host.hostname,
      port,
      user: host.user ?? config.user ?? DEFAULT_SSH_USER,
      identityFile: host.identity_file ?? config.identity_file ?? DEFAULT_IDENTITY_FILE,
      proxyJump: jump ? {
        hostname: jump.hostname,
        port: jump.port ?? DEFAULT_SSH_PORT,
        user: jump.user ?? host.user ?? config.user ?? DEFAULT_SSH_USER,
        identityFile: jump.identity_file ?? host.identity_file ?? config.identity_file ?? DEFAULT_IDENTITY_FILE,
      } : null,
      internalIp: host.internal_ip ?? null,
      network: config.network ?? null,
    };
  });
}
