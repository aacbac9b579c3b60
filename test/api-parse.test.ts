import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Value } from '@sinclair/typebox/value';
import { formatSpecError, parseSpecText, specKind, validateSpec } from '../api/parse.js';
import { replicaGroupsOf } from '../api/replica-groups.js';
import { AnySpec, type ServiceSpec } from '../api/spec.js';

const BROKEN = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'broken-yaml');
const USER_ENV = { PRESENT_TOKEN: 'secret-value', HF_TOKEN: 'hf_secret' };

function parseOk(text: string, env: Record<string, string | undefined> = USER_ENV): AnySpec[] {
  const { specs, errors } = parseSpecText(text, 'ok.yml', env);
  expect(errors.map(formatSpecError)).to.deep.equal([]);
  for (const spec of specs) expect(Value.Check(AnySpec, spec), JSON.stringify([...Value.Errors(AnySpec, spec)][0])).to.equal(true);
  return specs as AnySpec[];
}

function errorsOf(text: string, env: Record<string, string | undefined> = USER_ENV): string[] {
  return parseSpecText(text, 'x.yml', env).errors.map(formatSpecError);
}

describe('api: parsing broken YAML', () => {
  const fixtures = readdirSync(BROKEN).filter((name) => name.endsWith('.yml')).sort();

  it('has a fixture with expected errors for each broken case', () => {
    expect(fixtures.length).to.be.at.least(15);
    for (const name of fixtures) expect(readdirSync(BROKEN)).to.include(name.replace(/\.yml$/, '.expected'));
  });

  for (const name of fixtures) {
    it(`reports exactly the expected errors for ${name}`, () => {
      const text = readFileSync(join(BROKEN, name), 'utf8');
      const expected = readFileSync(join(BROKEN, name.replace(/\.yml$/, '.expected')), 'utf8').trimEnd().split('\n');
      const { specs, errors } = parseSpecText(text, name, USER_ENV);
      expect(errors.map(formatSpecError)).to.deep.equal(expected);
      expect(specs, 'a file with errors yields no specs to apply').to.deep.equal([]);
      for (const error of errors) {
        expect(error.message).not.to.include('secret-value');
        expect(error.message).not.to.include('12345');
      }
    });
  }
});

describe('api: parsing valid YAML', () => {
  it('parses a fleet as written', () => {
    const [fleet] = parseOk(`
type: fleet
name: h100-pool
nodes: 0..2
idle_duration: 10m
backends: [gpucloud]
resources:
  gpu: H100:80GB:8
  disk: 500GB..
`);
    expect(fleet).to.deep.equal({
      type: 'fleet', name: 'h100-pool', nodes: '0..2', idle_duration: '10m', backends: ['gpucloud'],
      resources: { gpu: 'H100:80GB:8', disk: '500GB..' },
    });
    expect(specKind(fleet)).to.equal('fleet');
  });

  it('parses a task with every field, resolving bare env names from the user environment', () => {
    const [task] = parseOk(`
type: task
name: train
priority: 50
python: 3.12
files:
  - data
  - config.yml:/workflow/config.yml
repos:
  - .
  - url: https://github.com/org/repo.git
    branch: main
    path: /repo
working_dir: src
commands:
  - pip install -r requirements.txt
  - python train.py
ports: [6006, "8080:80"]
max_duration: 1h30m
retry:
  on_events: [no-capacity, interruption]
  duration: 2h
utilization_policy:
  min_gpu_utilization: 10
  time_window: 30m
env:
  - HF_TOKEN
  - MODE=fast
  - EMPTY=
  - EQUALS=a=b
resources:
  gpu: {name: [h100, "rtx pro 6000"], memory: 80GB.., count: 1..2}
  cpu: 8..
  memory: 64GB..
  shm_size: 16GB
`);
    expect(task).to.deep.equal({
      type: 'task', name: 'train', priority: 50, python: '3.12',
      files: ['data', 'config.yml:/workflow/config.yml'],
      repos: ['.', { url: 'https://github.com/org/repo.git', branch: 'main', path: '/repo' }],
      working_dir: 'src',
      commands: ['pip install -r requirements.txt', 'python train.py'],
      ports: [6006, '8080:80'],
      max_duration: '1h30m',
      retry: { on_events: ['no-capacity', 'interruption'], duration: '2h' },
      utilization_policy: { min_gpu_utilization: 10, time_window: '30m' },
      env: { HF_TOKEN: 'hf_secret', MODE: 'fast', EMPTY: '', EQUALS: 'a=b' },
      resources: { gpu: { name: ['h100', 'rtx pro 6000'], memory: '80GB..', count: '1..2' }, cpu: '8..', memory: '64GB..', shm_size: '16GB' },
    });
    expect(specKind(task)).to.equal('run');
  });

  it('parses a task with an image, private registry and retry: true', () => {
    const [task] = parseOk(`
type: task
image: ghcr.io/org/trainer:1.2
registry_auth: {username: bot, password: s3cret}
retry: true
max_duration: off
`);
    expect(task).to.deep.equal({
      type: 'task', image: 'ghcr.io/org/trainer:1.2', registry_auth: { username: 'bot', password: 's3cret' }, retry: true, max_duration: 'off',
    });
  });

  it('parses a service with model, volumes, scaling and probes', () => {
    const [service] = parseOk(`
type: service
name: llama
image: vllm/vllm-openai:latest
env:
  MODEL_ID: meta-llama/Llama-3.1-8B-Instruct
  MAX_LEN: 8192
  DEBUG: false
  HF_TOKEN:
commands:
  - vllm serve $MODEL_ID --max-model-len $MAX_LEN
port: 8000
model: meta-llama/Llama-3.1-8B-Instruct
volumes:
  - /mnt/hf-cache:/root/.cache/huggingface
  - {instance_path: /data, path: /data, optional: true}
replicas: 1..4
scaling: {metric: rps, target: 10, scale_down_delay: 15m}
auth: false
probes:
  - type: http
    url: /health
    method: get
    headers: [{name: Accept, value: application/json}]
    interval: 5s
    timeout: 2s
    ready_after: 2
resources:
  gpu: L4:24GB
`);
    expect(service).to.deep.equal({
      type: 'service', name: 'llama', image: 'vllm/vllm-openai:latest',
      env: { MODEL_ID: 'meta-llama/Llama-3.1-8B-Instruct', MAX_LEN: '8192', DEBUG: 'false', HF_TOKEN: 'hf_secret' },
      commands: ['vllm serve $MODEL_ID --max-model-len $MAX_LEN'],
      port: 8000,
      model: 'meta-llama/Llama-3.1-8B-Instruct',
      volumes: ['/mnt/hf-cache:/root/.cache/huggingface', { instance_path: '/data', path: '/data', optional: true }],
      replicas: '1..4',
      scaling: { metric: 'rps', target: 10, scale_down_delay: '15m' },
      auth: false,
      probes: [{ type: 'http', url: '/health', method: 'get', headers: [{ name: 'Accept', value: 'application/json' }], interval: '5s', timeout: '2s', ready_after: 2 }],
      resources: { gpu: 'L4:24GB' },
    });
  });

  it('parses a service whose model is a map', () => {
    const [service] = parseOk('type: service\ncommands: [serve]\nport: 80\nmodel: {name: llama, type: chat, format: openai}\n');
    expect(service).to.deep.include({ model: { name: 'llama', type: 'chat', format: 'openai' } });
  });

  it('parses a dev environment', () => {
    const [dev] = parseOk(`
type: dev-environment
name: my-box
ide: cursor
python: "3.11"
inactivity_duration: 2h
ports: [8888]
resources:
  gpu: RTXPRO6000:96GB
`);
    expect(dev).to.deep.equal({
      type: 'dev-environment', name: 'my-box', ide: 'cursor', python: '3.11', inactivity_duration: '2h', ports: [8888],
      resources: { gpu: 'RTXPRO6000:96GB' },
    });
  });

  it('reads several documents from one file, skipping empty ones and comments', () => {
    const specs = parseOk(`
# a fleet and two runs
type: fleet
name: pool
nodes: 1
---
---
type: task
name: pool
commands: [echo one]
---
type: task
commands: [echo two]
`);
    expect(specs.map((spec) => [spec.type, spec.name])).to.deep.equal([['fleet', 'pool'], ['task', 'pool'], ['task', undefined]]);
  });

  it('does not change the parsed document it was given', () => {
    const input = { type: 'task', commands: ['echo'], env: ['A=1'], python: 3.12 };
    const { spec } = validateSpec(input);
    expect(spec).to.deep.equal({ type: 'task', commands: ['echo'], env: { A: '1' }, python: '3.12' });
    expect(input).to.deep.equal({ type: 'task', commands: ['echo'], env: ['A=1'], python: 3.12 });
  });

  it('reads a variable set to an empty string in the environment as set', () => {
    const [task] = parseOk('type: task\ncommands: [x]\nenv: [BLANK]\n', { BLANK: '' });
    expect(task).to.deep.include({ env: { BLANK: '' } });
  });
});

describe('api: validating JSON specs', () => {
  it('accepts a spec with env as a map or a fully valued list', () => {
    expect(validateSpec({ type: 'task', commands: ['a'], env: { A: 'x' } })).to.deep.equal({ spec: { type: 'task', commands: ['a'], env: { A: 'x' } }, errors: [] });
    expect(validateSpec({ type: 'task', commands: ['a'], env: ['A=x'] }).spec).to.deep.equal({ type: 'task', commands: ['a'], env: { A: 'x' } });
  });

  it('rejects a bare variable name, which the server cannot fill', () => {
    expect(validateSpec({ type: 'task', commands: ['a'], env: ['HF_TOKEN'] })).to.deep.equal({
      spec: null,
      errors: [{ file: null, line: null, column: null, path: 'env[0]', message: 'HF_TOKEN has no value; send it as HF_TOKEN=value' }],
    });
  });

  it('reports every error at once with field paths and no position', () => {
    const { spec, errors } = validateSpec({ type: 'service', port: 'http', commands: ['a', 1], resources: { gpu: 'H10' }, extra: true });
    expect(spec).to.equal(null);
    expect(errors.map(formatSpecError)).to.deep.equal([
      'port: expected an integer from 1 to 65535, got "http"',
      'commands[1]: expected a string, got 1',
      'resources.gpu: unknown GPU model "H10"; did you mean "H100"?',
      'extra: unknown field; expected one of type, name, priority, resources, env, image, registry_auth, python, files, repos, working_dir, volumes, privileged, nvcc, docker, entrypoint, shell, max_duration, stop_duration, retry, utilization_policy, spot_policy, max_price, backends, fleets, schedule, instances, commands, port, model, replicas, scaling, auth, strip_prefix, probes, max_body_size, first_byte_timeout, idle_timeout, cold_start_timeout, startup_timeout, drain_timeout, gateway, https, rate_limits',
    ]);
  });

  it('rejects what is not a spec at all', () => {
    expect(validateSpec('task').errors.map(formatSpecError)).to.deep.equal(['expected a map with a type field ("fleet", "dev-environment", "task", "service", "gateway"), got "task"']);
    expect(validateSpec({ type: 3 }).errors.map(formatSpecError)).to.deep.equal(['type: expected one of "fleet", "dev-environment", "task", "service", "gateway", got 3']);
  });

  it('requires commands or an image for tasks and services, and a range of replicas to come with scaling', () => {
    expect(validateSpec({ type: 'task' }).errors.map(formatSpecError)).to.deep.equal(['commands: required field is missing; a task without an image needs commands']);
    expect(validateSpec({ type: 'service', image: 'x', port: 80, replicas: 2, scaling: { metric: 'rps', target: 1 } }).errors.map(formatSpecError))
      .to.deep.equal(['scaling: scaling needs replicas as a range such as 1..4; replicas is fixed at 2']);
    expect(validateSpec({ type: 'service', image: 'x', port: 80, replicas: '0..3', scaling: { metric: 'rps', target: 0 } }).errors.map(formatSpecError))
      .to.deep.equal(['scaling.target: expected a number greater than 0, got 0']);
    expect(validateSpec({ type: 'service', image: 'x', port: 80, replicas: '1..3', scaling: { metric: 'rps', target: 1, window: '2h' } }).errors.map(formatSpecError))
      .to.deep.equal(['scaling.window: at most 1h: request statistics are kept for an hour']);
  });

  it('checks each replica group: its count with its own scaling, a name of its own, commands or an image', () => {
    const scaling = { metric: 'rps', target: 1 };
    const service = (replicas: unknown[], more: Record<string, unknown> = {}) => validateSpec({ type: 'service', port: 80, replicas, ...more }).errors.map(formatSpecError);
    expect(service([{ name: 'a', count: 1, commands: ['x'] }, { count: '0..2', scaling, image: 'y' }])).to.deep.equal([]);
    expect(service([{ count: '1..3', commands: ['x'] }, { count: 2, scaling, commands: ['x'] }])).to.deep.equal([
      'replicas[0].scaling: required field is missing; count "1..3" is a range, and scaling (metric rps, target) sets how the count follows load',
      'replicas[1].scaling: scaling needs count as a range such as 1..4; count is fixed at 2',
    ]);
    expect(service([{ name: 'a', count: 1, commands: ['x'] }, { name: 'a', count: 1 }])).to.deep.equal([
      'replicas[1].name: "a" names group 0 as well; each replica group needs its own name',
      'replicas[1].commands: required field is missing; a replica group needs commands or an image, here or at the top level',
    ]);
    expect(service([{ count: '0..2', scaling }], { commands: ['x'], scaling })).to.deep.equal([
      'scaling: with replica groups, each group with a count range takes its own scaling; move scaling into those groups',
    ]);
    expect(service([{ commands: ['x'] }], {})).to.deep.equal(['replicas[0].count: required field is missing; expected a number of replicas such as 2 or a range such as 0..4']);
    expect(service([{ count: 1, image: 'y', python: '3.12', commands: ['x'] }])).to.deep.equal(['replicas[0].python: cannot be combined with image; the image brings its own Python']);
  });

  it('runs a replica group in its own python or image in place of the service\'s', () => {
    const { spec } = validateSpec({ type: 'service', port: 80, image: 'vllm/vllm-openai', commands: ['serve'], replicas: [{ name: 'gpu', count: 1 }, { name: 'cpu', count: 1, python: '3.12' }] });
    const groups = replicaGroupsOf(spec as ServiceSpec).map((group) => [group.name, group.spec.image ?? null, group.spec.python ?? null]);
    expect(groups).to.deep.equal([['gpu', 'vllm/vllm-openai', null], ['cpu', null, '3.12']]);
  });

  it('takes an open-ended fleet (nodes: 0..) on kubernetes alone, where the cluster bounds it, and refuses it where machines are rented', () => {
    const fleet = (more: Record<string, unknown>) => validateSpec({ type: 'fleet', name: 'f', nodes: '0..', ...more }).errors.map(formatSpecError);
    expect(fleet({ backends: ['kubernetes'] })).to.deep.equal([]);
    const refusal = 'nodes: an open range is not supported on a fleet that may rent machines, as it could spend without limit; give an upper bound, e.g. 0..4 (a fleet with backends: [kubernetes] alone may leave it open: the cluster\'s nodes bound it)';
    expect(fleet({})).to.deep.equal([refusal]);
    expect(fleet({ backends: ['kubernetes', 'gpucloud'] })).to.deep.equal([refusal]);
  });

  it('takes a fleet\'s nodes.target between min and max, keeping the map, and locates a target out of range', () => {
    expect(parseOk('type: fleet\nname: f\nnodes:\n  min: 2\n  max: 10\n  target: 6\n')[0]).to.deep.include({ nodes: { min: 2, max: 10, target: 6 } });
    expect(parseOk('type: fleet\nname: f\nnodes: {min: 2, target: 2, max: 4}\n')[0]).to.include({ nodes: '2..4' });
    expect(errorsOf('type: fleet\nname: f\nnodes:\n  min: 2\n  target: 1\n  max: 4\n')).to.deep.equal([
      'x.yml:5:11: nodes.target: expected a number of at least min (2): apply provisions target instances and the fleet keeps min',
    ]);
    expect(errorsOf('type: fleet\nname: f\nnodes: {min: 0, target: 5, max: 4}\n')).to.deep.equal(['x.yml:3:25: nodes.target: expected a number of at most max (4)']);
    expect(errorsOf('type: fleet\nname: f\nnodes: {min: 0, target: two, max: 4}\n')).to.deep.equal(['x.yml:3:25: nodes.target: expected an integer of at least 0, got "two"']);
    expect(errorsOf('type: fleet\nname: f\nnodes: {min: 0, target: 2}\n')).to.deep.equal([
      'x.yml:3:8: nodes: an open range is not supported on a fleet that may rent machines, as it could spend without limit; give a max, e.g. {min: 0, target: 2, max: 6} (a fleet with backends: [kubernetes] alone may leave it open: the cluster\'s nodes bound it)',
    ]);
  });

  it('takes instances by name, hostname, or fleet and number, and locates a selector that says none or two of them', () => {
    const instances = ['my-fleet-3', { name: 'my-fleet-4' }, { hostname: '203.0.113.10' }, { fleet: 'my-fleet', instance: 3 }];
    expect(parseOk('type: dev-environment\ninstances:\n  - my-fleet-3\n  - name: my-fleet-4\n  - hostname: 203.0.113.10\n  - fleet: my-fleet\n    instance: 3\n')[0]).to.deep.include({ instances });
    expect(errorsOf('type: task\ncommands: [x]\ninstances:\n  - name: a\n    hostname: b\n  - fleet: f\n  - instance: 2\n  - fleet: team/f\n    instance: 1\n')).to.deep.equal([
      'x.yml:8:12: instances[3].fleet: "team/f" is another project\'s (dstack\'s exports); imported resources are not supported: each project here has its own fleets and gateways, so apply one in this project and name it',
    ]);
    expect(errorsOf('type: task\ncommands: [x]\ninstances:\n  - name: a\n    hostname: b\n  - fleet: f\n  - instance: 2\n')).to.deep.equal([
      'x.yml:4:5: instances[0]: expected one of name, hostname, or fleet with instance (its number in the fleet), such as {fleet: my-fleet, instance: 3}',
      'x.yml:6:5: instances[1].instance: required field is missing; a fleet names its instance by number: give instance, such as 3 for my-fleet-3',
      'x.yml:7:5: instances[2].fleet: required field is missing; instance is a number within a fleet: give its fleet',
    ]);
  });

  it('tells a resources field written at the top level to go under resources', () => {
    expect(validateSpec({ type: 'task', commands: ['x'], gpu: 'A100:8', shm_size: '24GB' }).errors.map(formatSpecError)).to.deep.equal([
      'gpu: unknown field at the top level; gpu belongs under resources: indent it there',
      'shm_size: unknown field at the top level; shm_size belongs under resources: indent it there',
    ]);
  });
});

describe('api: error formatting', () => {
  it('formats file, line, column, path and message, leaving out what is unknown', () => {
    const base = { file: 'hello.yml', line: 4, column: 3, path: 'resources.gpu', message: 'unknown GPU model "H10"; did you mean "H100"?' };
    expect(formatSpecError(base)).to.equal('hello.yml:4:3: resources.gpu: unknown GPU model "H10"; did you mean "H100"?');
    expect(formatSpecError({ ...base, line: null, column: null })).to.equal('hello.yml: resources.gpu: unknown GPU model "H10"; did you mean "H100"?');
    expect(formatSpecError({ ...base, file: null, line: null, column: null, path: '' })).to.equal('unknown GPU model "H10"; did you mean "H100"?');
  });

  it('quotes map keys that are not plain identifiers in paths', () => {
    expect(errorsOf('type: task\ncommands: [x]\nenv: {"MY VAR": x}\n')).to.deep.equal([
      'x.yml:3:7: env["MY VAR"]: "MY VAR" is not a valid variable name; use letters, digits and _, not starting with a digit',
    ]);
  });

  it('points at the line of an unknown field inside a list item', () => {
    expect(errorsOf('type: service\nimage: x\nport: 80\nprobes:\n  - type: http\n    urll: /health\n')).to.deep.equal([
      'x.yml:6:5: probes[0].urll: unknown field; did you mean "url"?',
    ]);
  });

  it('points at the key of a field left empty', () => {
    expect(errorsOf('type: task\ncommands:\n')).to.deep.equal(['x.yml:2:1: commands: expected a list of strings, got nothing']);
  });

  it('points at a max_price that is not a number of dollars per hour, in a run and in a fleet', () => {
    expect(errorsOf('type: task\ncommands: [echo]\nmax_price: $2/h\n')).to.deep.equal([
      'x.yml:3:12: max_price: expected a price in dollars per hour such as 2.5, got "$2/h"',
    ]);
    expect(errorsOf('type: fleet\nname: f\nnodes: 1\nmax_price: 0\n')).to.deep.equal([
      'x.yml:4:12: max_price: expected a price in dollars per hour such as 2.5, got 0',
    ]);
    expect(parseOk('type: service\nport: 80\ncommands: [serve]\nmax_price: 1.25\n')[0]).to.include({ max_price: 1.25 });
  });

  it('follows YAML anchors and aliases to find the value', () => {
    expect(errorsOf('type: task\ncommands: &c [echo]\nfiles: *c\nports: [*c]\n')).to.deep.equal([
      'x.yml:4:9: ports[0]: expected a port from 1 to 65535 or a mapping such as "8080:80", got a list',
    ]);
  });
});
