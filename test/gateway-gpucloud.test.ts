import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';
import type { Gateway } from '../api/gateways.js';
import type { GpucloudInstance } from '../backends/gpucloud/api.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { addProject, makeHome, releaseInstances, runCli } from './helpers/cli.js';
import { startPebble, type Pebble } from './helpers/pebble.js';
import { freePort } from './helpers/ports.js';
import { applyItems } from './helpers/services.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

const DOMAIN = 'cloud-gw.test';
const PLAIN_SERVICE = `
require('node:http').createServer((req, res) => res.end('plain ' + req.url)).listen(Number(process.env.PORT), '127.0.0.1');
`;

/**
 * A gateway with backend gpucloud: it rents the emulator's machine without GPUs, whose agent runs the gateway, which gets
 * its certificates from pebble as a local gateway does.
 */
describe('gateways on a gpucloud instance (pglite)', function () {
  this.timeout(60_000);
  let emulator: RunningEmulator;
  let server: TestServer;
  let httpPort: number;
  let httpsPort: number;
  let serverPort: number;
  let pebble: Pebble;
  /** The certificate the first instance served: a replacement instance serves the same one, from the database. */
  let certificate: string;
  const home = makeHome();
  const caFiles = process.env.NODE_EXTRA_CA_CERTS;

  const overHttp = (host: string, address: string, port: number, path: string) => new Promise<{ status: number; body: string }>((resolve, reject) => {
    request({ host: address, port, path, agent: false, headers: { host: `${host}:${port}` } }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => resolve({ status: res.statusCode!, body }));
    }).on('error', reject).end();
  });
  const overHttps = (host: string, path: string) => new Promise<{ status: number; body: string; certificate: string }>((resolve, reject) => {
    httpsRequest({ host: '127.0.0.1', port: httpsPort, path, servername: host, ca: pebble.root, agent: false, headers: { host: `${host}:${httpsPort}` } }, (res) => {
      let body = '';
      const served = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => resolve({ status: res.statusCode!, body, certificate: served }));
    }).on('error', reject).end();
  });
  const gatewayOf = async () => (await server.api('GET', '/api/projects/main/gateways/edge')).body as Gateway;
  const cloudInstances = async () => ((await (await fetch(`${emulator.url}/_emulator/state`, { headers: { authorization: `Bearer ${emulator.apiKey}` } })).json()) as { instances: GpucloudInstance[] }).instances;
  const running = async () => eventually(async () => {
    const gateway = await gatewayOf();
    return gateway.status === 'running' && gateway.instance?.id ? gateway : null;
  }, 30_000, 'the gateway to run on its instance').catch(async (error: Error) => {
    throw new Error(`${error.message}: ${JSON.stringify(await gatewayOf())}; events: ${JSON.stringify((await server.api('GET', '/api/projects/main/events?object=edge')).body)}`);
  });

  before(async () => {
    [httpPort, httpsPort, serverPort] = await Promise.all([freePort(), freePort(), freePort()]);
    pebble = await startPebble({ httpPort, validitySeconds: 3600 });
    // The instances' agents, and so the gateway job, trust pebble's own HTTPS listener through it.
    process.env.NODE_EXTRA_CA_CERTS = pebble.caFile;
    emulator = await startEmulator({ port: 0, bootDelayMs: 100, cpuOffers: true });
    // The address the instance calls the server at, given as server_url: a name, where the server itself listens on 127.0.0.1.
    server = await startTestServer('pglite', `server_url: http://localhost:${serverPort}/\n${gpucloudConfig(emulator.url, emulator.apiKey)}`, { port: serverPort });
    await applyItems(server.url, server.adminToken,
      { spec: { type: 'gateway', name: 'edge', domain: `*.${DOMAIN}`, default: true, backend: 'gpucloud', certificate: { type: 'lets-encrypt', acme_server: pebble.directoryUrl }, public_ip: false, http_port: httpPort, https_port: httpsPort } },
      { spec: { type: 'fleet', name: 'l4', backends: ['gpucloud'], nodes: '0..1', resources: { gpu: 'L4' } } },
      { spec: { type: 'service', name: 'plain', port: 8000, auth: false, resources: { gpu: 'L4' }, files: ['server.cjs'], commands: ['node server.cjs'] }, files: [{ path: 'server.cjs', contentBase64: Buffer.from(PLAIN_SERVICE).toString('base64') }] });
    await addProject(home.home, server.url);
  });

  after(async () => {
    await server?.api('DELETE', '/api/projects/main/gateways/edge').catch(() => undefined);
    await server?.api('POST', '/api/projects/main/runs/plain/stop', {}).catch(() => undefined);
    if (server) await releaseInstances(server).catch(() => undefined);
    await server?.stop();
    await emulator?.close();
    await pebble?.stop();
    if (caFiles === undefined) delete process.env.NODE_EXTRA_CA_CERTS;
    else process.env.NODE_EXTRA_CA_CERTS = caFiles;
    home.remove();
  });

  it('rents the cheapest machine without GPUs and serves the service at <run>.<domain> on the instance\'s address, over HTTPS with a certificate from the ACME server', async () => {
    const gateway = await running();
    const [instance] = (await cloudInstances()).filter((i) => i.id === gateway.instance!.id);
    expect([instance?.offer_id, instance?.name]).to.deep.equal([gateway.instance!.offer, 'gateway-edge']);
    expect(gateway.instance).to.deep.include({ offer: 'cpu-x0-us-east-1', pricePerHour: 0.05 });
    expect(gateway.address).to.equal(`http://127.0.0.1:${httpPort} https://127.0.0.1:${httpsPort}`);
    const gatewayCommands = readdirSync('/proc').filter((pid) => /^\d+$/.test(pid))
      .map((pid) => { try { return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0'); } catch { return []; } })
      .filter((argv) => argv.includes('gateway-server') && argv.includes(String(httpPort)));
    expect(gatewayCommands.map((argv) => argv[argv.indexOf('--server') + 1]), 'the job calls the server at its server_url').to.deep.equal([`http://localhost:${serverPort}`]);
    const hostname = `plain.${DOMAIN}`;
    await eventually(async () => (await gatewayOf()).certificates.find((c) => c.hostname === hostname)?.state === 'valid', 30_000, `a certificate for ${hostname}`);
    const answer = await eventually(async () => {
      const tried = await overHttps(hostname, '/hello').catch(() => null);
      return tried?.status === 200 && tried;
    }, 20_000, 'the service through the gateway over HTTPS');
    expect(answer.body).to.equal('plain /hello');
    certificate = answer.certificate;
    const plain = await overHttp(hostname, '127.0.0.1', httpPort, '/hello');
    expect(plain.status, 'HTTP redirects to HTTPS').to.equal(308);
    const listed = await runCli(['gateway', 'list'], { home: home.home, env: { COLUMNS: '400' } });
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.stdout).to.include(`http://127.0.0.1:${httpPort} https://127.0.0.1:${httpsPort} on ${gateway.instance!.id} (cpu-x0-us-east-1, $0.05/h)`);
    expect(listed.stdout).to.match(new RegExp(`plain\\.cloud-gw\\.test: valid until \\d{4}-\\d\\d-\\d\\d`));
    expect(listed.stdout).to.match(/\srunning\s/);
  });

  it('replaces an instance that is lost, and refuses to move the gateway to another backend', async () => {
    const lost = (await running()).instance!.id!;
    const killed = await fetch(`${emulator.url}/_emulator/faults`, {
      method: 'POST', headers: { authorization: `Bearer ${emulator.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ kill_instances: [lost] }),
    });
    expect(killed.status).to.equal(200);
    const replaced = await eventually(async () => {
      const gateway = await running();
      return gateway.instance!.id !== lost && gateway;
    }, 40_000, 'a new instance for the gateway');
    expect((await cloudInstances()).find((i) => i.id === lost)?.status).to.be.oneOf(['failed', 'terminated']);
    expect(replaced.instance!.offer).to.equal('cpu-x0-us-east-1');
    const again = await eventually(async () => {
      const tried = await overHttps(`plain.${DOMAIN}`, '/again').catch(() => null);
      return tried?.body === 'plain /again' && tried;
    }, 20_000, 'the service through the new instance');
    expect(again.certificate, 'the new instance serves the certificate from the database, not a new one').to.equal(certificate);
    const moved = await server.api('POST', '/api/projects/main/apply', { items: [{ spec: { ...replaced.spec, backend: 'local' } }] });
    expect([moved.status, moved.body.error.code]).to.deep.equal([409, 'backend_change']);
  });

  it('terminates the instance when the gateway is deleted', async () => {
    const { id } = (await running()).instance!;
    expect((await server.api('DELETE', '/api/projects/main/gateways/edge')).status).to.be.oneOf([200, 202, 204]);
    await eventually(async () => (await cloudInstances()).find((i) => i.id === id)?.status === 'terminated', 20_000, 'the gateway\'s instance to terminate');
    await eventually(async () => (await overHttp(`plain.${DOMAIN}`, '127.0.0.1', httpPort, '/gone').catch(() => null)) === null, 10_000, 'the gateway to stop listening');
    expect((await cloudInstances()).filter((i) => i.name === 'gateway-edge' && i.status !== 'terminated' && i.status !== 'failed')).to.deep.equal([]);
  });
});
