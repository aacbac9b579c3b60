import { expect } from 'chai';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';

interface Answer { status: number; headers: Headers; body: any }

describe('gpucloud emulator API', () => {
  let emulator: RunningEmulator;
  const call = async (method: string, path: string, body?: unknown, key: string | null = emulator.apiKey): Promise<Answer> => {
    const response = await fetch(`${emulator.url}${path}`, {
      method,
      headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), 'content-type': 'application/json' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : null };
  };
  const createBody = (clientToken: string, offerId = 'h100-x1-us-east-1') =>
    ({ offer_id: offerId, name: `n-${clientToken}`, client_token: clientToken, agent: { token: 'agent-token-0123456789' } });

  // Instances never finish provisioning here: these tests are about the API, not about booting agents.
  before(async () => {
    emulator = await startEmulator({ bootDelayMs: 600_000, capacity: { H200: 1 } });
  });
  after(async () => {
    await emulator?.close();
  });
  afterEach(() => {
    emulator.faults.noCapacity.clear();
    emulator.faults.apiErrors = 0;
    emulator.faults.rateLimit = 0;
    emulator.faults.slowMs = 0;
  });

  it('serves its API under /v1 on loopback', () => {
    expect(emulator.url).to.match(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
  });

  it('answers 401 invalid_api_key without the right bearer key, on every route', async () => {
    for (const [path, key] of [['/offers', null], ['/instances', 'wrong-key'], ['/_emulator/state', 'wrong-key']] as const) {
      const answer = await call('GET', path, undefined, key);
      expect(answer.status, path).to.equal(401);
      expect(answer.body.error.code).to.equal('invalid_api_key');
      expect(answer.body.error.message).to.be.a('string').and.not.empty;
    }
  });

  it('creates with 201, answers a repeated client_token with 200 and the same instance, never echoing the agent token', async () => {
    const first = await call('POST', '/instances', createBody('token-a'));
    expect(first.status).to.equal(201);
    expect(first.body).to.include({ client_token: 'token-a', offer_id: 'h100-x1-us-east-1', status: 'provisioning', agent_url: null, region: 'us-east-1' });
    expect(first.body.id).to.match(/^i-[0-9a-f]{16}$/);
    expect(first.body.gpu).to.deep.equal({ model: 'H100', memory_gb: 80, count: 1 });
    expect(JSON.stringify(first.body)).not.to.contain('agent-token-0123456789');
    const again = await call('POST', '/instances', createBody('token-a'));
    expect(again.status).to.equal(200);
    expect(again.body.id).to.equal(first.body.id);
    const fetched = await call('GET', `/instances/${first.body.id}`);
    expect(fetched.status).to.equal(200);
    expect(fetched.body).to.deep.equal(first.body);
    const listed = await call('GET', '/instances');
    expect(listed.body.instances.filter((instance: { client_token: string }) => instance.client_token === 'token-a')).to.have.length(1);
  });

  it('refuses a client_token reused for another offer with 409 idempotency_mismatch', async () => {
    await call('POST', '/instances', createBody('token-b'));
    const answer = await call('POST', '/instances', createBody('token-b', 'l4-x1-us-east-1'));
    expect(answer.status).to.equal(409);
    expect(answer.body.error.code).to.equal('idempotency_mismatch');
  });

  it('names the offending field of an invalid create with 400 invalid_request', async () => {
    const missing = await call('POST', '/instances', { offer_id: 'h100-x1-us-east-1', name: 'x', client_token: 't' });
    expect(missing.status).to.equal(400);
    expect(missing.body.error.code).to.equal('invalid_request');
    expect(missing.body.error.message).to.match(/agent/);
    const shortToken = await call('POST', '/instances', { ...createBody('t2'), agent: { token: 'short' } });
    expect(shortToken.status).to.equal(400);
    expect(shortToken.body.error.message).to.match(/\/agent\/token/);
    const notJson = await call('POST', '/instances', '{"offer_id":');
    expect(notJson.status).to.equal(400);
    expect(notJson.body.error.code).to.equal('invalid_json');
    const huge = await call('POST', '/instances', { ...createBody('t3'), name: 'x'.repeat(70_000) });
    expect(huge.status).to.equal(413);
    expect(huge.body.error.code).to.equal('payload_too_large');
  });

  it('answers 404 for an unknown offer, instance or route, and 405 with Allow for a wrong method', async () => {
    const offer = await call('POST', '/instances', createBody('token-c', 'a100-x1-us-east-1'));
    expect([offer.status, offer.body.error.code]).to.deep.equal([404, 'offer_not_found']);
    const instance = await call('GET', '/instances/i-ffffffffffffffff');
    expect([instance.status, instance.body.error.code]).to.deep.equal([404, 'instance_not_found']);
    const gone = await call('DELETE', '/instances/i-ffffffffffffffff');
    expect([gone.status, gone.body.error.code]).to.deep.equal([404, 'instance_not_found']);
    const route = await call('GET', '/volumes');
    expect([route.status, route.body.error.code]).to.deep.equal([404, 'not_found']);
    const method = await call('PUT', '/offers');
    expect([method.status, method.body.error.code]).to.deep.equal([405, 'method_not_allowed']);
    expect(method.headers.get('allow')).to.equal('GET');
  });

  it('terminates with 202, and a repeated DELETE of a terminated instance is 202 too', async () => {
    const { body: created } = await call('POST', '/instances', createBody('token-d', 'l4-x8-eu-west-1'));
    const first = await call('DELETE', `/instances/${created.id}`);
    expect(first.status).to.equal(202);
    expect(first.body).to.include({ id: created.id, status: 'terminated' });
    const second = await call('DELETE', `/instances/${created.id}`);
    expect(second.status).to.equal(202);
    expect((await call('GET', `/instances/${created.id}`)).body.status).to.equal('terminated');
  });

  it('answers 409 no_capacity once a model\'s instances are used up, and frees capacity on termination', async () => {
    const { body: first } = await call('POST', '/instances', createBody('h200-1', 'h200-x1-eu-west-1'));
    const refused = await call('POST', '/instances', createBody('h200-2', 'h200-x2-us-east-1'));
    expect([refused.status, refused.body.error.code]).to.deep.equal([409, 'no_capacity']);
    const offers = (await call('GET', '/offers')).body.offers as { id: string; availability: string }[];
    expect(offers.filter((offer) => offer.id.startsWith('h200-')).every((offer) => offer.availability === 'unavailable')).to.equal(true);
    expect(offers.find((offer) => offer.id === 'h100-x1-us-east-1')?.availability).to.equal('available');
    const state = await call('GET', '/_emulator/state');
    expect(state.body.capacity.H200).to.deep.equal({ limit: 1, used: 1 });
    await call('DELETE', `/instances/${first.id}`);
    expect((await call('POST', '/instances', createBody('h200-2', 'h200-x2-us-east-1'))).status).to.equal(201);
  });

  it('makes clusters of one model in one region, refuses one larger than a region holds, and keeps their instances to them', async () => {
    const clusterBody = (clientToken: string, size: number, offerId = 'rtxpro6000-x1-us-east-1') => ({ offer_id: offerId, name: 'pool', client_token: clientToken, size });
    const tooBig = await call('POST', '/clusters', clusterBody('cluster-big', 5));
    expect([tooBig.status, tooBig.body.error.code, tooBig.body.error.message])
      .to.deep.equal([409, 'cluster_does_not_fit', 'a cluster of 5 RTXPRO6000 machines does not fit in one region: us-east-1 holds at most 4']);
    const made = await call('POST', '/clusters', clusterBody('cluster-a', 2));
    expect(made.status).to.equal(201);
    expect(made.body).to.include({ name: 'pool', region: 'us-east-1', gpu_model: 'RTXPRO6000', size: 2 });
    expect(made.body.id).to.match(/^c-[0-9a-f]{16}$/);
    expect(made.body.network).to.match(/^127\.64\.\d+\.0\/24$/);
    const again = await call('POST', '/clusters', clusterBody('cluster-a', 2));
    expect([again.status, again.body.id]).to.deep.equal([200, made.body.id]);
    const inCluster = (token: string, offerId = 'rtxpro6000-x1-us-east-1') => call('POST', '/instances', { ...createBody(token, offerId), cluster_id: made.body.id });
    const elsewhere = await inCluster('c-eu', 'rtxpro6000-x1-eu-west-1');
    expect([elsewhere.status, elsewhere.body.error.code]).to.deep.equal([409, 'cluster_mismatch']);
    const members = [await inCluster('c-1'), await inCluster('c-2')];
    expect(members.map((member) => [member.status, member.body.cluster_id])).to.deep.equal([[201, made.body.id], [201, made.body.id]]);
    const prefix = made.body.network.replace(/0\/24$/, '');
    expect(members.map((member) => member.body.internal_ip)).to.deep.equal([`${prefix}1`, `${prefix}2`]);
    const full = await inCluster('c-3');
    expect([full.status, full.body.error.code]).to.deep.equal([409, 'cluster_does_not_fit']);
    const inUse = await call('DELETE', `/clusters/${made.body.id}`);
    expect([inUse.status, inUse.body.error.code]).to.deep.equal([409, 'cluster_in_use']);
    for (const member of members) await call('DELETE', `/instances/${member.body.id}`);
    expect((await call('DELETE', `/clusters/${made.body.id}`)).status).to.equal(200);
    expect((await call('GET', `/clusters/${made.body.id}`)).body.error.code).to.equal('cluster_not_found');
    expect((await call('GET', '/clusters')).body).to.deep.equal({ clusters: [] });
  });

  it('injects faults through its control endpoint, which faults never touch', async () => {
    const set = await call('POST', '/_emulator/faults', { rate_limit: 1, api_errors: 1, no_capacity: ['L4'] });
    expect(set.status).to.equal(200);
    expect(set.body).to.deep.equal({ no_capacity: ['L4'], api_errors: 1, slow_ms: 0, rate_limit: 1, spot_interruption_after_ms: null, gpu_utilization: null });
    expect((await call('GET', '/_emulator/state')).body.faults).to.deep.equal(set.body);
    const limited = await call('GET', '/offers');
    expect([limited.status, limited.body.error.code, limited.headers.get('retry-after')]).to.deep.equal([429, 'rate_limited', '1']);
    const broken = await call('GET', '/offers');
    expect([broken.status, broken.body.error.code]).to.deep.equal([500, 'internal_error']);
    expect((await call('GET', '/offers')).status).to.equal(200);
    const soldOut = await call('POST', '/instances', createBody('token-e', 'l4-x1-us-east-1'));
    expect([soldOut.status, soldOut.body.error.code]).to.deep.equal([409, 'no_capacity']);
    await call('POST', '/_emulator/faults', { slow_ms: 300 });
    const started = Date.now();
    expect((await call('GET', '/offers')).status).to.equal(200);
    expect(Date.now() - started).to.be.at.least(290);
  });

  it('refuses invalid faults and kills only instances that run', async () => {
    const invalid = await call('POST', '/_emulator/faults', { api_errors: -1 });
    expect([invalid.status, invalid.body.error.code]).to.deep.equal([400, 'invalid_request']);
    const unknownModel = await call('POST', '/_emulator/faults', { no_capacity: ['A100'] });
    expect(unknownModel.status).to.equal(400);
    const unknown = await call('POST', '/_emulator/faults', { kill_instances: ['i-0000000000000000'] });
    expect([unknown.status, unknown.body.error.code]).to.deep.equal([404, 'instance_not_found']);
    const { body: provisioning } = await call('POST', '/instances', createBody('token-f', 'rtxpro6000-x1-us-east-1'));
    const notRunning = await call('POST', '/_emulator/faults', { kill_instances: [provisioning.id] });
    expect([notRunning.status, notRunning.body.error.code]).to.deep.equal([409, 'instance_not_running']);
    await emulator.faults.killInstance(provisioning.id).then(
      () => expect.fail('killing a provisioning instance succeeded'),
      (error: Error) => expect(error.message).to.match(/not running/),
    );
  });
});

describe('gpucloud emulator options', () => {
  it('refuses capacity for unknown models or below zero', async () => {
    await startEmulator({ capacity: { A100: 2 } }).then(
      () => expect.fail('started with an unknown model'),
      (error: Error) => expect(error.message).to.match(/unknown GPU model in capacity: A100/),
    );
    await startEmulator({ capacity: { L4: -1 } }).then(
      () => expect.fail('started with negative capacity'),
      (error: Error) => expect(error.message).to.match(/capacity of L4/),
    );
  });

  it('serves with the API key it is given', async () => {
    const emulator = await startEmulator({ apiKey: 'given-key-123' });
    try {
      expect(emulator.apiKey).to.equal('given-key-123');
      const response = await fetch(`${emulator.url}/offers`, { headers: { authorization: 'Bearer given-key-123' } });
      expect(response.status).to.equal(200);
    } finally {
      await emulator.close();
    }
  });
});
