import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { CRD_GROUP, CRD_NAMES } from '../api/crd.js';
import type { Fleet, Run } from '../api/objects.js';
import { fleetStatus, reconcilingStatus, runStatus, stalledStatus, type StatusContext } from '../server/kubernetes/status.js';
import { argoCdHealth } from './helpers/argocd-health.js';

const context: StatusContext = { generation: 2, project: 'main', previous: undefined, now: '2026-01-01T00:00:00.000Z', serverUrl: null };
const submitted = new Date('2026-01-01T00:00:00.000Z');

function task(fields: Partial<Run>): Run {
  return {
    id: 'r1', project: 'main', user: 'kubernetes', name: 'hello', kind: 'task', status: 'running', statusMessage: '', terminationReason: null,
    priority: 0, generation: 1, attempt: 1, spec: {}, fleet: 'local', instance: 'local-1', gpu: null, pricePerHour: null, cost: 0, exitCode: null,
    queuePosition: null, service: null, ssh: null, submittedAt: submitted.toISOString(), startedAt: null, finishedAt: null, inactivityStopAt: null,
    ...fields,
  };
}

/** Argo CD's verdict on an object of generation 2 with this status. */
function health(status: unknown, generation = 2) {
  return argoCdHealth({ apiVersion: 'orchestrator.dev/v1alpha1', kind: 'Task', metadata: { name: 'hello', generation }, spec: {}, status });
}

describe('Argo CD health check (manifests/argocd/health.lua) on the status the orchestrator writes', () => {
  it('is given to Argo CD for every kind of crds/', () => {
    const kustomization = parse(readFileSync(join(import.meta.dirname, '..', 'manifests', 'argocd', 'kustomization.yaml'), 'utf8'));
    const files: string[] = kustomization.configMapGenerator[0].files;
    expect(files.sort()).to.deep.equal(Object.values(CRD_NAMES).map((names) => `resource.customizations.health.${CRD_GROUP}_${names.kind}=health.lua`).sort());
  });

  it('is Progressing until the orchestrator has written a status for the current generation', () => {
    expect(health(undefined).status).to.equal('Progressing');
    expect(health(runStatus({ ...context, generation: 1 }, task({ status: 'done', exitCode: 0 }), submitted)).status).to.equal('Progressing');
  });

  it('is Progressing while a run is queued, provisioning or being replaced, with the orchestrator\'s words', () => {
    expect(health(runStatus(context, task({ status: 'submitted', statusMessage: 'waiting to be scheduled' }), submitted)))
      .to.deep.equal({ status: 'Progressing', message: 'Submitted: waiting to be scheduled' });
    expect(health(runStatus(context, task({ status: 'provisioning' }), submitted)).status).to.equal('Progressing');
    expect(health(reconcilingStatus(context, 'Replacing', 'stopping run hello to apply generation 2')).status).to.equal('Progressing');
  });

  it('is Healthy while a task runs and once it has succeeded, and for an active fleet', () => {
    expect(health(runStatus(context, task({ status: 'running' }), submitted)).status).to.equal('Healthy');
    expect(health(runStatus(context, task({ status: 'done', exitCode: 0 }), submitted)).status).to.equal('Healthy');
    const fleet: Fleet = { id: 'f1', project: 'main', name: 'local', status: 'active', statusMessage: '', generation: 1, spec: {}, instances: [], createdAt: submitted.toISOString() };
    expect(health(fleetStatus(context, fleet))).to.deep.equal({ status: 'Healthy', message: 'Active: 0 instances' });
  });

  it('is Degraded for a failed run and for a spec the orchestrator cannot apply, saying why', () => {
    expect(health(runStatus(context, task({ status: 'failed', terminationReason: 'failed_by_user_code', statusMessage: 'exited with code 3', exitCode: 3 }), submitted)))
      .to.deep.equal({ status: 'Degraded', message: 'FailedByUserCode: exited with code 3' });
    expect(health(stalledStatus(context, 'InvalidSpec', 'spec.resources.gpu: unknown GPU model "H10"')))
      .to.deep.equal({ status: 'Degraded', message: 'InvalidSpec: spec.resources.gpu: unknown GPU model "H10"' });
  });

  it('is Degraded with the message for a service whose rollout stalled, which stays Ready while the old generation serves', () => {
    const message = 'rollout of generation 2 failed: 3 replicas in a row ended before becoming ready; the last: exited with code 1; generation 1 still serves 2 replicas';
    const ready = { group: null, generation: 1, state: 'ready' as const, statusMessage: 'ready', instance: 'local-1', startedAt: null, readyAt: null };
    const service = task({
      kind: 'service', generation: 2, statusMessage: message,
      service: {
        desiredReplicas: 2, replicas: [{ ...ready, replica: 0 }, { ...ready, replica: 1 }], stableGeneration: 1,
        stall: { generation: 2, reason: 'failing', message: message.split('; generation 1')[0]! },
        path: '/proxy/services/main/hello/', model: null, modelPath: null, gatewayUrl: null, gatewayModelUrl: null,
      },
    });
    const status = runStatus(context, service, submitted);
    const condition = (type: string) => status.conditions.find((c) => c.type === type);
    expect(condition('Stalled')).to.include({ status: 'True', reason: 'RolloutFailed', message });
    expect(condition('Ready')).to.include({ status: 'True', message });
    expect(health(status)).to.deep.equal({ status: 'Degraded', message: `RolloutFailed: ${message}` });
  });

  it('is Degraded for a run stopped on purpose, as kstatus reads it Failed: it runs again only when its spec changes', () => {
    expect(health(runStatus(context, task({ status: 'terminated', terminationReason: 'stopped_by_user', statusMessage: 'stopped' }), submitted)))
      .to.deep.equal({ status: 'Degraded', message: 'StoppedByUser: stopped' });
  });

  it('is Progressing, as kstatus reads it, for Ready False with neither Reconciling nor Stalled', () => {
    const readyFalse = { observedGeneration: 2, conditions: [{ type: 'Ready', status: 'False', reason: 'Waiting', message: 'on something', lastTransitionTime: context.now, observedGeneration: 2 }] };
    expect(health(readyFalse)).to.deep.equal({ status: 'Progressing', message: 'Waiting: on something' });
  });
});
