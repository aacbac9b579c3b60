import type { JobFile, JobRepo } from '../api/agent.js';
import { cronExpressions, formatUtc, nextTick } from '../api/cron.js';
import { describeRequirement, normalizeResources } from '../api/resources.js';
import type { RunSpec } from '../api/spec.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import type { Queryable } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import type { ProjectRecord } from '../store/projects.js';
import { getRunByName, insertRun, type RunRecord } from '../store/runs.js';
import { isLiveSchedule, isSchedule, updateSchedule } from '../store/schedules.js';
import { updateService } from '../store/services.js';
import { conflict } from './http-errors.js';
import { randomRunName } from './run-names.js';

const MAX_GENERATED_NAME_TRIES = 5;

export function stillActive(live: RunRecord): string {
  return isSchedule(live)
    ? `${live.name} is a scheduled ${live.kind}; end its schedule first (orchestrator stop ${live.name}) or choose another name`
    : `run ${live.name} is still active; stop it first (orchestrator stop ${live.name}) or choose another name`;
}

/** When a schedule's next run is due if applied now; undefined for a run without schedule. */
export function firstTick(spec: RunSpec): Date | undefined {
  return spec.schedule ? nextTick(cronExpressions(spec.schedule), new Date()) : undefined;
}

/** A live service that a re-apply of its name updates in place (a schedule of a service is updated as a schedule). */
export function isLiveService(live: RunRecord): boolean {
  return live.kind === 'service' && !isSchedule(live) && !FINISHED_RUN_STATUSES.includes(live.status) && live.desired === 'run';
}

/**
 * Writes a submitted run and its event; a live run of the same name is a conflict, except a service, which
 * takes the new spec (a rolling update, or a new replica count in place), and a schedule, which takes the new
 * spec and schedule from its next run on. The caller sends the NOTIFY.
 */
export async function submitRun(q: Queryable, project: ProjectRecord, userId: string, spec: RunSpec, files: JobFile[], repos: JobRepo[]): Promise<RunRecord> {
  const requirement = normalizeResources(spec.resources, 'run', spec.max_price);
  const priority = spec.priority ?? 0;
  const nextTickAt = firstTick(spec);
  if (nextTickAt && spec.name) {
    const live = await getRunByName(q, project.id, spec.name);
    if (live && isLiveSchedule(live)) {
      await updateSchedule(q, live, { spec: spec as Record<string, unknown>, files, repos, requirement, priority }, nextTickAt);
      await recordEvent(q, { projectId: project.id, objectKind: 'run', objectId: live.id, objectName: live.name, reason: 'Updated', message: `generation ${live.generation + 1}; next run at ${formatUtc(nextTickAt)}` });
      return live;
    }
  }
  if (spec.type === 'service' && spec.name) {
    const live = await getRunByName(q, project.id, spec.name);
    if (live && isLiveService(live)) {
      const { update, generation } = await updateService(q, live, { spec: spec as Record<string, unknown>, files, repos, requirement, priority });
      if (update !== 'unchanged') {
        const message = {
          rolling: `generation ${generation}: replicas are replaced one at a time`,
          settled: `back to generation ${generation}, whose replicas serve on`,
          'in-place': 'replicas and scaling changed in place',
        }[update];
        await recordEvent(q, { projectId: project.id, objectKind: 'run', objectId: live.id, objectName: live.name, reason: 'Updated', message });
      }
      return live;
    }
  }
  const submitted = nextTickAt ? `scheduled ${spec.type} submitted (${describeRequirement(requirement)}); first run at ${formatUtc(nextTickAt)}` : `${spec.type} submitted (${describeRequirement(requirement)})`;
  let run: RunRecord | null = null;
  for (let attempt = 0; !run && attempt < (spec.name ? 1 : MAX_GENERATED_NAME_TRIES); attempt++) {
    const name = spec.name ?? randomRunName();
    run = await insertRun(q, {
      projectId: project.id, userId, name, kind: spec.type,
      spec: { ...spec, name } as Record<string, unknown>, files, repos, requirement, priority, nextTickAt,
      event: { reason: 'Submitted', message: submitted },
    });
    if (!run && spec.name) {
      const live = await getRunByName(q, project.id, name);
      throw conflict(live ? stillActive(live) : `run ${name} was submitted at the same moment; try again`);
    }
  }
  if (!run) throw conflict('could not find a free run name; give the run a name');
  return run;
}
