import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { JobsChangesRequest, JobSubmission, JobsWatchRequest } from '../api/agent.js';
import { HttpError } from './http-errors.js';

/** Body of POST /api/jobs/:id/stop. */
export const StopRequest = Type.Object({
  abort: Type.Optional(Type.Boolean()),
  graceSeconds: Type.Optional(Type.Number({ minimum: 0, maximum: 3600 })),
}, { additionalProperties: false });
export type StopRequest = Static<typeof StopRequest>;

/** Job ids name directories and containers' labels: letters, digits, '.', '_' and '-' only. */
export const JOB_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

const submissionCheck = TypeCompiler.Compile(JobSubmission);
const stopCheck = TypeCompiler.Compile(StopRequest);
const watchCheck = TypeCompiler.Compile(JobsWatchRequest);
const changesCheck = TypeCompiler.Compile(JobsChangesRequest);

function invalid(what: string, details: unknown): HttpError {
  return new HttpError(422, 'invalid_request', `invalid ${what}`, details);
}

function checked<T extends TSchema>(what: string, check: ReturnType<typeof TypeCompiler.Compile<T>>, body: unknown): Static<T> {
  if (check.Check(body)) return body;
  const errors = [...check.Errors(body)].slice(0, 20).map((error) => ({ path: error.path || '/', message: error.message }));
  throw invalid(what, errors);
}

export function parseSubmission(body: unknown): JobSubmission {
  const submission = checked('job submission', submissionCheck, body);
  if (!JOB_ID_PATTERN.test(submission.jobId)) {
    throw invalid('job submission', [{ path: '/jobId', message: `must match ${JOB_ID_PATTERN.source}` }]);
  }
  return submission;
}

export function parseStopRequest(body: unknown): StopRequest {
  return checked('stop request', stopCheck, body);
}

export function parseJobsWatch(body: unknown): JobsWatchRequest {
  return checked('jobs watch request', watchCheck, body);
}

export function parseJobsChanges(body: unknown): JobsChangesRequest {
  return checked('jobs changes request', changesCheck, body);
}

/** A non-negative integer query parameter, `fallback` when absent. */
export function integerParam(name: string, value: string | string[] | undefined, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const text = Array.isArray(value) ? value[value.length - 1]! : value;
  if (!/^\d+$/.test(text)) throw invalid(`query parameter ${name}`, [{ path: name, message: 'must be a non-negative integer' }]);
  return Number(text);
}
