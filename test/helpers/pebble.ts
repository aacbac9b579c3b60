import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';
import { eventually } from './server.js';

export interface Pebble {
  /** The ACME directory, over HTTPS with `caFile`'s certificate. */
  directoryUrl: string;
  /** The certificate of pebble's own HTTPS listeners, for NODE_EXTRA_CA_CERTS of the processes that call it. */
  caFile: string;
  /** The root that pebble's certificates chain to, from its management endpoint. */
  root: string;
  stop(): Promise<void>;
}

export interface PebbleOptions {
  /** Where pebble sends HTTP-01 validations: the gateway's HTTP port. */
  httpPort: number;
  /** Lifetime of the certificates it issues, in seconds. */
  validitySeconds: number;
  /** Hostnames it refuses to issue for. */
  blocked?: string[];
}

function get(url: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request(url, { ca }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    }).on('error', reject).end();
  });
}

function stopped(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/**
 * Debian's pebble (Let's Encrypt's test ACME server) with pebble-challtestsrv as its DNS server, which answers
 * every name with 127.0.0.1, so that pebble's HTTP-01 validations reach the gateway on this machine.
 */
export async function startPebble(options: PebbleOptions): Promise<Pebble> {
  const dir = mkdtempSync(join(tmpdir(), 'pebble-'));
  const caFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-keyout', keyFile, '-out', caFile, '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { stdio: 'ignore' });
  const [acmePort, managementPort, dnsPort, challengeManagementPort, tlsPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
  writeFileSync(join(dir, 'pebble.json'), JSON.stringify({
    pebble: {
      listenAddress: `127.0.0.1:${acmePort}`, managementListenAddress: `127.0.0.1:${managementPort}`,
      certificate: caFile, privateKey: keyFile, httpPort: options.httpPort, tlsPort,
      ocspResponderURL: '', externalAccountBindingRequired: false, domainBlocklist: options.blocked ?? [],
      certificateValidityPeriod: options.validitySeconds,
    },
  }));
  const challenges = spawn('pebble-challtestsrv', ['-defaultIPv4', '127.0.0.1', '-defaultIPv6', '', '-dns01', `127.0.0.1:${dnsPort}`,
    '-http01', '', '-https01', '', '-tlsalpn01', '', '-management', `127.0.0.1:${challengeManagementPort}`], { stdio: 'ignore' });
  const pebble = spawn('pebble', ['-config', join(dir, 'pebble.json'), '-dnsserver', `127.0.0.1:${dnsPort}`], {
    stdio: 'ignore', env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0' },
  });
  const ca = readFileSync(caFile, 'utf8');
  const stop = async () => {
    await Promise.all([stopped(pebble), stopped(challenges)]);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const directoryUrl = `https://127.0.0.1:${acmePort}/dir`;
    await eventually(async () => (await get(directoryUrl, ca)).status === 200, 10_000, 'pebble to serve its directory');
    const root = (await get(`https://127.0.0.1:${managementPort}/roots/0`, ca)).body;
    return { directoryUrl, caFile, root, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
