import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ModelList } from '../api/gateway.js';
import { isDnsLabel } from '../api/names.js';
import type { ServiceRoute } from '../api/services.js';
import { admit, isMember, type CallerAccess } from './access.js';
import { GatewayError } from './errors.js';
import type { Exchange } from './proxy-core.js';
import type { RoutingTable } from './routing-table.js';

export const MODELS_PREFIX = '/proxy/models/';

/** `/proxy/models/<project>/[v1/]<route>?<query>`, from the raw request line. */
const MODELS_URL = /^\/proxy\/models\/([^/?]*)\/(?:v1\/)?([^?]*)(\?.*)?$/;
/** `/[v1/]<route>?<query>` on a gateway's `gateway.<domain>`, whose project is the gateway's. */
const GATEWAY_MODELS_URL = /^\/(?:v1\/)?([^?]*)(\?.*)?$/;
const FORWARDED_ROUTES = new Set(['chat/completions', 'completions', 'embeddings']);
/** A request body is read whole to find its model; no service accepts more than this by default. */
const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024;

const notFound = (message: string) => new GatewayError(404, 'not_found', message);

/** What a request to the model endpoint asks for: the list of models, or a request for one model's service. */
export type ModelRequest = { kind: 'list'; body: ModelList } | { kind: 'forward'; exchange: Exchange };

/** Which project's endpoint a request calls, and what it asks of it. */
interface ModelCall {
  project: string;
  route: string;
  query: string;
}

/** A call to the server's `/proxy/models/<project>/...`. */
export function serverModelCall(req: IncomingMessage): ModelCall {
  const match = MODELS_URL.exec(req.url ?? '');
  const [, project = '', route = '', query = ''] = match ?? [];
  if (!match || !isDnsLabel(project)) throw notFound(`no model endpoint at ${req.url}`);
  return { project, route, query };
}

/** A call to a gateway's `gateway.<domain>/...`, the endpoint of `project`'s services that the gateway publishes. */
export function gatewayModelCall(project: string, req: IncomingMessage): ModelCall {
  const match = GATEWAY_MODELS_URL.exec(req.url ?? '');
  if (!match) throw notFound(`no model endpoint at ${req.url}`);
  return { project, route: match[1] ?? '', query: match[2] ?? '' };
}

/**
 * The OpenAI-compatible endpoint of a project: lists the models its services declare and sends each
 * request to the service whose model the body names, with the body's bytes unchanged.
 */
export async function modelRequest(access: CallerAccess, table: RoutingTable, call: ModelCall, req: IncomingMessage): Promise<ModelRequest> {
  const { project, route, query } = call;
  const services = table.models(project);
  if (route === 'models') {
    if (req.method !== 'GET') throw new GatewayError(405, 'method_not_allowed', `${req.method} is not allowed on ${route}; use GET`, { Allow: 'GET' });
    return { kind: 'list', body: await modelList(access, project, services, req) };
  }
  if (route === '') throw notFound('name a route after the model endpoint\'s base: it serves v1/models, v1/chat/completions, v1/completions and v1/embeddings');
  if (!FORWARDED_ROUTES.has(route)) throw notFound(`no route ${route} on the model endpoint; it serves v1/models, v1/chat/completions, v1/completions and v1/embeddings`);
  if (req.method !== 'POST') throw new GatewayError(405, 'method_not_allowed', `${req.method} is not allowed on ${route}; use POST`, { Allow: 'POST' });
  const limit = Math.max(0, ...services.map((service) => service.maxBodyBytes)) || DEFAULT_MAX_BODY_BYTES;
  const body = await readBody(req, limit);
  const model = modelOf(body);
  const service = services.find((candidate) => candidate.model?.name === model);
  if (!service) throw new GatewayError(404, 'model_not_found', `The model \`${model}\` does not exist in project ${project}.`);
  await admit(access, service, req, true);
  const servicePath = `${service.model!.prefix}/${route}`;
  return { kind: 'forward', exchange: { route: service, path: `${servicePath}${query}`, servicePath, body, errorShape: 'openai' } };
}

export function sendModelList(res: ServerResponse, list: ModelList, answerHeaders: Record<string, string> = {}): void {
  const body = JSON.stringify(list);
  res.writeHead(200, { ...answerHeaders, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** Public models for anyone; the others only for members of the project, as their services would answer them. */
async function modelList(access: CallerAccess, project: string, services: ServiceRoute[], req: IncomingMessage): Promise<ModelList> {
  const member = services.some((service) => service.auth) && await isMember(access, services[0]!.projectId, req.headers, true);
  const shown = services.filter((service, index) => (!service.auth || member)
    && services.findIndex((other) => other.model!.name === service.model!.name) === index);
  return {
    object: 'list',
    data: shown.map((service) => ({ id: service.model!.name, object: 'model', created: service.createdAt, owned_by: project })),
  };
}

async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const tooLarge = () => new GatewayError(413, 'payload_too_large', `the body is larger than ${limit} bytes`);
  if (Number(req.headers['content-length'] ?? 0) > limit) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw tooLarge();
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function modelOf(body: Buffer): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (error) {
    throw new GatewayError(400, 'invalid_json', `We could not parse the JSON body of your request: ${(error as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new GatewayError(400, 'invalid_json', 'The request body must be a JSON object.');
  const { model } = parsed as { model?: unknown };
  if (typeof model !== 'string' || model === '') throw new GatewayError(400, 'model_missing', 'You must provide a model parameter.');
  return model;
}
