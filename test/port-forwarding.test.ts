import { expect } from 'chai';
import { createServer, type Server } from 'node:net';
import { choosePorts, portRequests } from '../cli/port-forwarding.js';

async function hold(port = 0): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((done) => server.listen({ port, host: '127.0.0.1', exclusive: true }, done));
  return { port: (server.address() as { port: number }).port, server };
}

describe('choosing the local ports of a run\'s ports', () => {
  const held: Server[] = [];
  afterEach(async () => {
    for (const server of held.splice(0)) await new Promise((done) => server.close(done));
  });

  it('moves a busy bare port up to the next free one, past ports this run already took', async () => {
    const busy = await hold();
    held.push(busy.server);
    const [first, second] = await choosePorts(portRequests([busy.port, busy.port + 1]));
    expect(first!.container).to.equal(busy.port);
    expect(first!.local).to.be.greaterThan(busy.port);
    expect(second!.container).to.equal(busy.port + 1);
    expect(second!.local).to.be.greaterThan(busy.port + 1).and.not.equal(first!.local);
  });

  it('refuses a busy explicit local port, and gives "*:port" a free port of its own', async () => {
    const busy = await hold();
    held.push(busy.server);
    let refused: Error | null = null;
    await choosePorts(portRequests([`${busy.port}:80`])).catch((error: Error) => { refused = error; });
    expect(refused!.message).to.equal(`local port ${busy.port} is in use, so ${busy.port}:80 cannot be forwarded; free it or map another local port`);
    const [any, other] = await choosePorts(portRequests(['*:80', '*:81']));
    expect(any!.container).to.equal(80);
    expect(any!.local).to.not.equal(other!.local);
    const check = await hold(any!.local);
    held.push(check.server);
  });
});
