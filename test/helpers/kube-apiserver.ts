import { KubeConfig } from '@kubernetes/client-node';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { get } from 'node:https';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from './ports.js';

const execFileAsync = promisify(execFile);

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const READY_TIMEOUT_MS = 60_000;

/** etcd and a kube-apiserver on loopback, in a folder of their own; the API server can be stopped and started again. */
export interface KubeCluster {
  /** The API server as its administrator (a static token). */
  kubeConfig: KubeConfig;
  /** The same, as a kubeconfig file the orchestrator's config.yml can name. */
  kubeconfigPath: string;
  /** A kubeconfig file of one of the users given to `startKubeCluster`, who may do what RBAC grants them. */
  kubeconfigPathOf(user: string): string;
  /** Stops the API server, leaving etcd and what it holds. */
  stopApiServer(): Promise<void>;
  /** Starts the API server again on the same address. */
  startApiServer(): Promise<void>;
  /** A second API server on the same etcd, on another port, for changes the first must not see; stop it when done. */
  startOtherApiServer(): Promise<{ kubeConfig: KubeConfig; stop(): Promise<void> }>;
  stop(): Promise<void>;
}

/**
 * The folder of the binaries that scripts/install-kubernetes.sh builds (or finds cached); while the test set-up is
 * still building them in the background, this waits for that build. Hooks that start a cluster allow for it.
 */
async function binaries(): Promise<string> {
  const { stdout } = await execFileAsync('sh', [join(ROOT, 'scripts', 'install-kubernetes.sh')], { encoding: 'utf8', maxBuffer: 1 << 20 });
  return stdout.trim();
}

/** How long a hook that starts a cluster may take: on a fresh machine, the API server's build may still be going. */
export const CLUSTER_START_TIMEOUT_MS = 20 * 60_000;

/** Ends the process; the API server is killed, as its graceful shutdown waits a minute for its watches to end. */
function stopProcess(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill(signal);
  });
}

function kubeConfigFor(port: number, token: string, caFile: string): KubeConfig {
  const config = new KubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'test', server: `https://127.0.0.1:${port}`, caData: readFileSync(caFile).toString('base64') }],
    users: [{ name: 'admin', token }],
    contexts: [{ name: 'test', cluster: 'test', user: 'admin' }],
    currentContext: 'test',
  });
  return config;
}

/** Whether the API server answers /readyz with 200; its certificate is not checked, as it may not be written yet. */
function isReady(port: number, token: string): Promise<boolean> {
  return new Promise((resolve) => {
    get({ host: '127.0.0.1', port, path: '/readyz', headers: { authorization: `Bearer ${token}` }, rejectUnauthorized: false }, (response) => {
      response.resume();
      resolve(response.statusCode === 200);
    }).on('error', () => resolve(false));
  });
}

/** Resolves once the API server is ready, or fails with what the process printed last. */
async function waitReady(port: number, token: string, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`kube-apiserver exited with ${child.exitCode}:\n${output()}`);
    if (await isReady(port, token)) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`kube-apiserver was not ready within ${READY_TIMEOUT_MS / 1000}s:\n${output()}`);
}

/**
 * Starts etcd and a kube-apiserver on free loopback ports: static-token authentication, RBAC authorization (the
 * administrator is in system:masters; `users`, such as system:serviceaccount:<namespace>:<name>, have what roles
 * grant them), serving certificates the API server makes for itself, no admission webhooks.
 */
export async function startKubeCluster(users: string[] = []): Promise<KubeCluster> {
  const bin = await binaries();
  const dir = mkdtempSync(join(tmpdir(), 'orch-kube-'));
  const token = randomBytes(16).toString('hex');
  const tokens = new Map(users.map((user) => [user, randomBytes(16).toString('hex')]));
  writeFileSync(join(dir, 'tokens.csv'), [`${token},admin,admin,system:masters`, ...users.map((user) => `${tokens.get(user)},${user},${user}`)].join('\n') + '\n');
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  writeFileSync(join(dir, 'service-account.key'), privateKey.export({ type: 'pkcs8', format: 'pem' }));

  const [etcdPort, peerPort, apiPort] = [await freePort(), await freePort(), await freePort()];
  const etcdUrl = `http://127.0.0.1:${etcdPort}`;
  const etcd = spawn('etcd', ['--data-dir', join(dir, 'etcd'), '--listen-client-urls', etcdUrl, '--advertise-client-urls', etcdUrl,
    '--listen-peer-urls', `http://127.0.0.1:${peerPort}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${peerPort}`,
    '--initial-cluster', `default=http://127.0.0.1:${peerPort}`], { stdio: 'ignore' });

  const apiServers = new Set<ChildProcess>();
  const startOn = async (port: number): Promise<ChildProcess> => {
    let output = '';
    const child = spawn(join(bin, 'kube-apiserver'), [
      `--etcd-servers=${etcdUrl}`, '--bind-address=127.0.0.1', `--secure-port=${port}`,
      `--cert-dir=${join(dir, `certs-${port}`)}`, `--token-auth-file=${join(dir, 'tokens.csv')}`, '--authorization-mode=RBAC',
      '--service-account-issuer=https://kubernetes.default.svc', `--service-account-key-file=${join(dir, 'service-account.key')}`,
      `--service-account-signing-key-file=${join(dir, 'service-account.key')}`, '--service-cluster-ip-range=10.0.0.0/24',
      '--enable-priority-and-fairness=false', '--disable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ServiceAccount',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (chunk: Buffer) => { output = (output + chunk.toString()).slice(-4000); };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    apiServers.add(child);
    child.once('exit', () => apiServers.delete(child));
    try {
      await waitReady(port, token, child, () => output);
    } catch (error) {
      await stopProcess(child, 'SIGKILL');
      throw error;
    }
    return child;
  };

  let apiServer: ChildProcess;
  try {
    apiServer = await startOn(apiPort);
  } catch (error) {
    await stopProcess(etcd);
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const caFile = (port: number) => join(dir, `certs-${port}`, 'apiserver.crt');
  const kubeConfig = kubeConfigFor(apiPort, token, caFile(apiPort));
  const kubeconfigPath = join(dir, 'kubeconfig');
  writeFileSync(kubeconfigPath, kubeConfig.exportConfig());
  users.forEach((user, index) => writeFileSync(join(dir, `kubeconfig-${index}`), kubeConfigFor(apiPort, tokens.get(user)!, caFile(apiPort)).exportConfig()));
  return {
    kubeConfig,
    kubeconfigPath,
    kubeconfigPathOf: (user) => {
      if (!tokens.has(user)) throw new Error(`${user} was not given to startKubeCluster`);
      return join(dir, `kubeconfig-${users.indexOf(user)}`);
    },
    stopApiServer: () => stopProcess(apiServer, 'SIGKILL'),
    startApiServer: async () => { apiServer = await startOn(apiPort); },
    startOtherApiServer: async () => {
      const port = await freePort();
      const child = await startOn(port);
      return { kubeConfig: kubeConfigFor(port, token, caFile(port)), stop: () => stopProcess(child, 'SIGKILL') };
    },
    stop: async () => {
      await Promise.all([...apiServers].map((child) => stopProcess(child, 'SIGKILL')));
      await stopProcess(etcd);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
