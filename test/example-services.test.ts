import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { NotFoundError } from 'openai';
import WebSocket from 'ws';
import { AgentClient } from '../agent/client.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { parseSpecText } from '../api/parse.js';
import type { ServiceSpec } from '../api/spec.js';
import { collectFiles } from '../cli/upload.js';
import { randomToken, submission, waitForState } from './helpers/agent-jobs.js';
import { eventually } from './helpers/server.js';
import { freePort } from './helpers/ports.js';

const SERVICES_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'examples', 'services');

interface RunningService {
  url: string;
  stop(): Promise<void>;
}

/** Runs a service's server.mjs with node on a port the system picks; resolves once it listens. */
async function startService(name: string, env: Record<string, string> = {}): Promise<RunningService> {
  const child: ChildProcess = spawn(process.execPath, [join(SERVICES_DIR, name, 'server.mjs')], {
    env: { ...process.env, ...env, PORT: '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const listening = /listening on 0\.0\.0\.0:(\d+)/.exec(output);
      if (listening) resolve(Number(listening[1]));
    });
    child.once('exit', (code) => reject(new Error(`${name} exited with ${code} before listening: ${output}`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await once(child, 'exit');
    },
  };
}

function readService(file: string): ServiceSpec {
  const path = join(SERVICES_DIR, file);
  const { specs, errors } = parseSpecText(readFileSync(path, 'utf8'), path, {});
  expect(errors).to.deep.equal([]);
  expect(specs).to.have.length(1);
  return specs[0] as ServiceSpec;
}

/**
 * Runs a service as its YAML says, on an agent with the process runtime (as the local backend and
 * the emulator do): its files copied the way the CLI reads them, its commands and env, on a free port.
 */
async function runFromYaml(spec: ServiceSpec, check: (url: string) => Promise<void>): Promise<void> {
  const token = randomToken();
  const agent: RunningAgent = await startAgent({ token, runtime: 'process', instanceId: `example-${spec.name}` });
  const client = new AgentClient(agent.url, token);
  const port = await freePort();
  const job = submission({
    runName: spec.name!,
    commands: spec.commands!,
    env: { ...(spec.env as Record<string, string>), PORT: String(port) },
    files: collectFiles(spec.files!, SERVICES_DIR),
  });
  try {
    await client.submit(job);
    const url = `http://127.0.0.1:${port}`;
    await eventually(async () => (await fetch(`${url}${spec.probes![0].url}`)).status === 200, 20_000, `${spec.name} to answer its probe`);
    await check(url);
  } finally {
    await client.stop(job.jobId);
    await waitForState(client, job.jobId, ['stopped', 'exited', 'failed']);
    await agent.close();
  }
}

async function postRaw(url: string, body: string): Promise<{ status: number; body: any }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: response.status, body: await response.json() };
}

function expectOpenAiError(body: any, fields: { type: string; param?: string | null; code?: string | null }): void {
  expect(body).to.have.all.keys('error');
  expect(body.error).to.have.all.keys('message', 'type', 'param', 'code');
  expect(body.error.message).to.be.a('string').and.not.empty;
  expect(body.error).to.include(fields);
}

describe('example service echo-llm (OpenAI-compatible test model)', function () {
  this.timeout(30_000);
  let service: RunningService;
  let openai: OpenAI;

  before(async () => {
    service = await startService('echo-llm', { MODEL: 'echo' });
    openai = new OpenAI({ baseURL: `${service.url}/v1`, apiKey: 'not-checked', maxRetries: 0 });
  });

  after(async () => {
    await service?.stop();
  });

  it('lists its one model', async () => {
    const models = [];
    for await (const model of openai.models.list()) models.push(model.id);
    expect(models).to.deep.equal(['echo']);
  });

  it('answers a chat with the last user message echoed, and counts the tokens', async () => {
    const completion = await openai.chat.completions.create({
      model: 'echo',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'first question' },
        { role: 'assistant', content: 'echo: first question' },
        { role: 'user', content: 'what is  the answer' },
      ],
    });
    expect(completion.object).to.equal('chat.completion');
    expect(completion.model).to.equal('echo');
    expect(completion.choices).to.have.length(1);
    expect(completion.choices[0].message).to.include({ role: 'assistant', content: 'echo: what is the answer' });
    expect(completion.choices[0].finish_reason).to.equal('stop');
    expect(completion.usage).to.deep.equal({ prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });
  });

  it('gives the same answer to the same prompt', async () => {
    const ask = () => openai.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: [{ type: 'text', text: 'same words' }] }] });
    const [first, second] = await Promise.all([ask(), ask()]);
    expect(first.choices[0].message.content).to.equal('echo: same words');
    expect(second.choices[0].message.content).to.equal(first.choices[0].message.content);
  });

  it('streams a chat token by token, adding up to the answer it gives unstreamed, then the usage when asked', async () => {
    const messages = [{ role: 'user' as const, content: 'tell me a story about streams' }];
    const whole = await openai.chat.completions.create({ model: 'echo', messages });
    const stream = await openai.chat.completions.create({ model: 'echo', messages, stream: true, stream_options: { include_usage: true } });
    const pieces: string[] = [];
    const finishReasons: string[] = [];
    let usage;
    for await (const chunk of stream) {
      expect(chunk.object).to.equal('chat.completion.chunk');
      for (const choice of chunk.choices) {
        if (choice.delta.content) pieces.push(choice.delta.content);
        if (choice.finish_reason) finishReasons.push(choice.finish_reason);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(pieces.length).to.be.greaterThan(3);
    expect(pieces.join('')).to.equal(whole.choices[0].message.content);
    expect(finishReasons).to.deep.equal(['stop']);
    expect(usage).to.deep.equal(whole.usage);
  });

  it('stops at max_tokens with finish_reason length, streamed or not', async () => {
    const request = { model: 'echo', messages: [{ role: 'user' as const, content: 'one two three four' }], max_tokens: 3 };
    const whole = await openai.chat.completions.create(request);
    expect(whole.choices[0].message.content).to.equal('echo: one two');
    expect(whole.choices[0].finish_reason).to.equal('length');
    expect(whole.usage?.completion_tokens).to.equal(3);
    const pieces: string[] = [];
    for await (const chunk of await openai.chat.completions.create({ ...request, stream: true })) pieces.push(chunk.choices[0]?.delta.content ?? '');
    expect(pieces.join('')).to.equal('echo: one two');
  });

  it('answers completions, one choice per prompt, streamed or not', async () => {
    const completion = await openai.completions.create({ model: 'echo', prompt: ['Once upon a time', 'hello'], max_tokens: 4 });
    expect(completion.object).to.equal('text_completion');
    expect(completion.choices.map((choice) => [choice.index, choice.text, choice.finish_reason])).to.deep.equal([
      [0, 'echo: Once upon a', 'length'],
      [1, 'echo: hello', 'stop'],
    ]);
    expect(completion.usage).to.deep.equal({ prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 });
    const pieces: string[] = [];
    for await (const chunk of await openai.completions.create({ model: 'echo', prompt: 'Once upon a time', stream: true })) {
      pieces.push(chunk.choices[0]?.text ?? '');
    }
    expect(pieces.filter((piece) => piece !== '').length).to.be.greaterThan(3);
    expect(pieces.join('')).to.equal('echo: Once upon a time');
  });

  it('takes fields it does not know, such as chat_template_kwargs, and ignores them', async () => {
    const response = await postRaw(`${service.url}/v1/chat/completions`, JSON.stringify({
      model: 'echo', messages: [{ role: 'user', content: 'think' }], chat_template_kwargs: { enable_thinking: false }, top_k: 5,
    }));
    expect(response.status).to.equal(200);
    expect(response.body.choices[0].message.content).to.equal('echo: think');
  });

  it('answers an unknown model with 404 in OpenAI\'s error shape', async () => {
    const error = await openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }).then(
      () => expect.fail('an unknown model was answered'),
      (caught: unknown) => caught,
    );
    expect(error).to.be.instanceOf(NotFoundError);
    expect((error as NotFoundError).status).to.equal(404);
    expect((error as NotFoundError).error).to.include({ type: 'invalid_request_error', param: 'model', code: 'model_not_found' });
    const raw = await postRaw(`${service.url}/v1/completions`, JSON.stringify({ model: 'gpt-4o', prompt: 'hi' }));
    expect(raw.status).to.equal(404);
    expectOpenAiError(raw.body, { type: 'invalid_request_error', param: 'model', code: 'model_not_found' });
  });

  it('answers malformed JSON and missing fields with 400 in OpenAI\'s error shape', async () => {
    const malformed = await postRaw(`${service.url}/v1/chat/completions`, '{"model": "echo", "messages": [');
    expect(malformed.status).to.equal(400);
    expectOpenAiError(malformed.body, { type: 'invalid_request_error' });
    const noMessages = await postRaw(`${service.url}/v1/chat/completions`, JSON.stringify({ model: 'echo' }));
    expect(noMessages.status).to.equal(400);
    expectOpenAiError(noMessages.body, { type: 'invalid_request_error', param: 'messages' });
    const badLimit = await postRaw(`${service.url}/v1/completions`, JSON.stringify({ model: 'echo', prompt: 'x', max_tokens: 0 }));
    expect(badLimit.status).to.equal(400);
    expectOpenAiError(badLimit.body, { type: 'invalid_request_error', param: 'max_tokens' });
  });

  it('refuses a body over 1 MiB with 413, and a wrong method with 405 naming the right one', async () => {
    const huge = await postRaw(`${service.url}/v1/completions`, JSON.stringify({ model: 'echo', prompt: 'x'.repeat(1024 * 1024) }));
    expect(huge.status).to.equal(413);
    expectOpenAiError(huge.body, { type: 'invalid_request_error', code: 'request_too_large' });
    const wrongMethod = await fetch(`${service.url}/v1/chat/completions`);
    expect(wrongMethod.status).to.equal(405);
    expect(wrongMethod.headers.get('allow')).to.equal('POST');
    expectOpenAiError(await wrongMethod.json(), { type: 'invalid_request_error', code: 'method_not_allowed' });
  });

  it('answers an unknown route with 404 and /health with 200', async () => {
    const unknown = await fetch(`${service.url}/v1/embeddings`, { method: 'POST', body: '{}' });
    expect(unknown.status).to.equal(404);
    expectOpenAiError(await unknown.json(), { type: 'invalid_request_error' });
    expect((await fetch(`${service.url}/health`)).status).to.equal(200);
  });
});

/** Opens a WebSocket and resolves once it is open. */
async function connect(url: string): Promise<WebSocket> {
  const socket = new WebSocket(url);
  await once(socket, 'open');
  return socket;
}

/** Sends one message and resolves with the next one the server sends back. */
async function roundTrip(socket: WebSocket, data: string | Buffer): Promise<{ data: Buffer; isBinary: boolean }> {
  const answer = once(socket, 'message') as Promise<[Buffer, boolean]>;
  socket.send(data);
  const [received, isBinary] = await answer;
  return { data: received, isBinary };
}

describe('example service ws-echo (WebSocket echo)', function () {
  this.timeout(30_000);
  let service: RunningService;
  let wsUrl: string;

  before(async () => {
    service = await startService('ws-echo');
    wsUrl = service.url.replace(/^http/, 'ws');
  });

  after(async () => {
    await service?.stop();
  });

  it('echoes text and binary messages as they were sent', async () => {
    const socket = await connect(wsUrl);
    const text = await roundTrip(socket, 'hello, wörld ✓');
    expect(text.isBinary).to.equal(false);
    expect(text.data.toString('utf8')).to.equal('hello, wörld ✓');
    const bytes = randomBytes(300);
    const binary = await roundTrip(socket, bytes);
    expect(binary.isBinary).to.equal(true);
    expect(binary.data.equals(bytes)).to.equal(true);
    socket.close();
  });

  it('echoes a 1 MB message whole, binary and text', async () => {
    const socket = await connect(wsUrl);
    const bytes = randomBytes(1024 * 1024);
    const binary = await roundTrip(socket, bytes);
    expect(binary.data.length).to.equal(bytes.length);
    expect(binary.data.equals(bytes)).to.equal(true);
    const text = 'ab✓'.repeat(200_000);
    const echoed = await roundTrip(socket, text);
    expect(echoed.isBinary).to.equal(false);
    expect(echoed.data.toString('utf8')).to.equal(text);
    socket.close();
  });

  it('joins a message sent in fragments into one', async () => {
    const socket = await connect(wsUrl);
    const answer = once(socket, 'message') as Promise<[Buffer, boolean]>;
    socket.send('first half, ', { fin: false });
    socket.send('second half', { fin: true });
    const [data, isBinary] = await answer;
    expect(isBinary).to.equal(false);
    expect(data.toString()).to.equal('first half, second half');
    socket.close();
  });

  it('answers a ping with a pong carrying the same data', async () => {
    const socket = await connect(wsUrl);
    const pong = once(socket, 'pong') as Promise<[Buffer]>;
    socket.ping(Buffer.from('are you there'));
    const [payload] = await pong;
    expect(payload.toString()).to.equal('are you there');
    socket.close();
  });

  it('closes cleanly, returning the close code', async () => {
    const socket = await connect(wsUrl);
    const closed = once(socket, 'close') as Promise<[number, Buffer]>;
    socket.close(1000, 'done');
    const [code] = await closed;
    expect(code).to.equal(1000);
  });

  it('closes with 1002 (protocol error) on a frame the client did not mask', async () => {
    const socket = await connect(wsUrl);
    const closed = once(socket, 'close') as Promise<[number, Buffer]>;
    socket.send('not masked', { mask: false });
    const [code, reason] = await closed;
    expect(code).to.equal(1002);
    expect(reason.toString()).to.include('masked');
  });

  it('answers plain HTTP on / with a short text, and refuses an upgrade that is not a WebSocket', async () => {
    const home = await fetch(`${service.url}/`);
    expect(home.status).to.equal(200);
    expect(await home.text()).to.include('WebSocket');
    const upgrade = request(`${service.url}/`, { headers: { connection: 'Upgrade', upgrade: 'h2c' } }).end();
    const [notWebSocket] = await once(upgrade, 'response') as [IncomingMessage];
    expect(notWebSocket.statusCode).to.equal(400);
    notWebSocket.resume();
  });
});

function defaultPort(service: string): number {
  const source = readFileSync(join(SERVICES_DIR, service, 'server.mjs'), 'utf8');
  return Number(/process\.env\.PORT \?\? (\d+)/.exec(source)?.[1]);
}

describe('example service YAMLs', function () {
  this.timeout(60_000);

  it('echo-llm.yml validates as an autoscaled model service with a health probe', () => {
    const spec = readService('echo-llm.yml');
    expect(spec).to.include({ type: 'service', name: 'echo-llm', port: 8000, model: 'echo', replicas: '1..3' });
    expect(spec.scaling).to.deep.equal({ metric: 'rps', target: 5 });
    expect(spec.probes?.[0]).to.include({ type: 'http', url: '/health' });
    expect(spec.env).to.deep.equal({ MODEL: spec.model });
    expect(defaultPort('echo-llm'), 'the port the server listens on without $PORT').to.equal(spec.port);
  });

  it('ws-echo.yml validates as a service with a health probe on the port the server listens on', () => {
    const spec = readService('ws-echo.yml');
    expect(spec).to.include({ type: 'service', name: 'ws-echo', port: 8080 });
    expect(spec.probes?.[0]).to.include({ type: 'http', url: '/health' });
    expect(spec.env, 'the agent tells the replica its port in $PORT').to.equal(undefined);
    expect(defaultPort('ws-echo'), 'the port the server listens on without $PORT').to.equal(spec.port);
  });

  it('echo-llm runs as its YAML says on the process runtime and answers the OpenAI client', async () => {
    await runFromYaml(readService('echo-llm.yml'), async (url) => {
      const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'not-checked', maxRetries: 0 });
      const completion = await openai.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'from the agent' }] });
      expect(completion.choices[0].message.content).to.equal('echo: from the agent');
    });
  });

  it('ws-echo runs as its YAML says on the process runtime and echoes', async () => {
    await runFromYaml(readService('ws-echo.yml'), async (url) => {
      const socket = await connect(url.replace(/^http/, 'ws'));
      expect((await roundTrip(socket, 'via the agent')).data.toString()).to.equal('via the agent');
      socket.close();
    });
  });
});
