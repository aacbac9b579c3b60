// A small OpenAI-compatible test model server: it answers every prompt with the prompt's own
// words after "echo:", token by token when asked to stream. Plain Node (node:http), no
// dependencies, so that an instance with Node alone can run it.
//   PORT (default 8000), MODEL (default "echo"), TOKEN_DELAY_MS (default 20, between streamed tokens)
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

const port = Number(process.env.PORT ?? 8000);
const model = process.env.MODEL ?? 'echo';
const tokenDelayMs = Number(process.env.TOKEN_DELAY_MS ?? 20);
const maxBodyBytes = 1024 * 1024;
const answerPrefix = 'echo:';

class RequestError extends Error {
  constructor(status, message, { type = 'invalid_request_error', param = null, code = null, headers = {} } = {}) {
    super(message);
    this.status = status;
    this.headers = headers;
    this.body = { error: { message, type, param, code } };
  }
}

function sendJson(res, status, body, headers = {}) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

async function readJson(req) {
  const chunks = [];
  let size = 0;
  // Read to the end even past the limit: a client still sending when the answer comes would see a reset instead of the 413.
  for await (const chunk of req) {
    size += chunk.length;
    if (size <= maxBodyBytes) chunks.push(chunk);
  }
  if (size > maxBodyBytes) throw new RequestError(413, `The request body is larger than ${maxBodyBytes} bytes.`, { code: 'request_too_large' });
  let body;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (error) {
    throw new RequestError(400, `We could not parse the JSON body of your request: ${error.message}`);
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new RequestError(400, 'The request body must be a JSON object.');
  }
  return body;
}

function words(text) {
  return text.split(/\s+/).filter((word) => word.length > 0);
}

/** The answer's tokens: the prefix, then each word of the prompt with its leading space. */
function answerTokens(prompt) {
  return [answerPrefix, ...words(prompt).map((word) => ` ${word}`)];
}

function messageText(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.filter((part) => part?.type === 'text').map((part) => String(part.text ?? '')).join(' ');
  return '';
}

function checkModel(body) {
  if (typeof body.model !== 'string' || body.model.length === 0) {
    throw new RequestError(400, 'You must provide a model parameter.', { param: 'model' });
  }
  if (body.model !== model) {
    throw new RequestError(404, `The model \`${body.model}\` does not exist.`, { param: 'model', code: 'model_not_found' });
  }
}

function tokenLimit(body) {
  const limit = body.max_completion_tokens ?? body.max_tokens;
  if (limit === undefined || limit === null) return Infinity;
  if (!Number.isInteger(limit) || limit < 1) {
    const param = body.max_completion_tokens === undefined ? 'max_tokens' : 'max_completion_tokens';
    throw new RequestError(400, `Invalid '${param}': expected an integer of at least 1, got ${JSON.stringify(limit)}.`, { param, code: 'invalid_value' });
  }
  return limit;
}

/** Each prompt's answer, cut at the token limit. */
function complete(prompts, limit) {
  return prompts.map((prompt) => {
    const tokens = answerTokens(prompt);
    return { tokens: tokens.slice(0, limit), finishReason: tokens.length > limit ? 'length' : 'stop', promptTokens: words(prompt).length };
  });
}

function usageOf(answers) {
  const promptTokens = answers.reduce((sum, answer) => sum + answer.promptTokens, 0);
  const completionTokens = answers.reduce((sum, answer) => sum + answer.tokens.length, 0);
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

function chatPrompt(body) {
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    throw new RequestError(400, "Invalid 'messages': expected a non-empty array of messages.", { param: 'messages' });
  }
  const lastUser = body.messages.findLast((message) => message?.role === 'user');
  return { answered: messageText(lastUser?.content), counted: body.messages.map((message) => messageText(message?.content)).join(' ') };
}

function completionPrompts(body) {
  if (typeof body.prompt === 'string') return [body.prompt];
  if (Array.isArray(body.prompt) && body.prompt.length > 0 && body.prompt.every((prompt) => typeof prompt === 'string')) return body.prompt;
  throw new RequestError(400, "Invalid 'prompt': expected a string or a non-empty array of strings.", { param: 'prompt' });
}

/** Writes SSE chunks one token at a time; stops early when the client goes away. */
async function stream(req, res, chunks) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  let gone = false;
  res.on('close', () => { gone = true; });
  for (const [index, chunk] of chunks.entries()) {
    if (gone) return;
    if (index > 0 && tokenDelayMs > 0) await sleep(tokenDelayMs);
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  }
  res.end('data: [DONE]\n\n');
}

function includeUsage(body) {
  return body.stream_options?.include_usage === true;
}

async function chatCompletions(req, res) {
  const body = await readJson(req);
  checkModel(body);
  const limit = tokenLimit(body);
  const prompt = chatPrompt(body);
  const [answer] = complete([prompt.answered], limit);
  const usage = usageOf([{ ...answer, promptTokens: words(prompt.counted).length }]);
  const head = { id: `chatcmpl-${randomUUID()}`, created: Math.floor(Date.now() / 1000), model };
  if (!body.stream) {
    sendJson(res, 200, {
      ...head,
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: answer.tokens.join(''), refusal: null }, logprobs: null, finish_reason: answer.finishReason }],
      usage,
    });
    return;
  }
  const chunk = (delta, finishReason) => ({ ...head, object: 'chat.completion.chunk', choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] });
  await stream(req, res, [
    chunk({ role: 'assistant', content: '' }, null),
    ...answer.tokens.map((token) => chunk({ content: token }, null)),
    chunk({}, answer.finishReason),
    ...(includeUsage(body) ? [{ ...head, object: 'chat.completion.chunk', choices: [], usage }] : []),
  ]);
}

async function completions(req, res) {
  const body = await readJson(req);
  checkModel(body);
  const limit = tokenLimit(body);
  const answers = complete(completionPrompts(body), limit);
  const head = { id: `cmpl-${randomUUID()}`, object: 'text_completion', created: Math.floor(Date.now() / 1000), model };
  if (!body.stream) {
    sendJson(res, 200, {
      ...head,
      choices: answers.map((answer, index) => ({ text: answer.tokens.join(''), index, logprobs: null, finish_reason: answer.finishReason })),
      usage: usageOf(answers),
    });
    return;
  }
  const chunk = (index, text, finishReason) => ({ ...head, choices: [{ text, index, logprobs: null, finish_reason: finishReason }] });
  await stream(req, res, [
    ...answers.flatMap((answer, index) => [
      ...answer.tokens.map((token) => chunk(index, token, null)),
      chunk(index, '', answer.finishReason),
    ]),
    ...(includeUsage(body) ? [{ ...head, choices: [], usage: usageOf(answers) }] : []),
  ]);
}

function models(req, res) {
  sendJson(res, 200, { object: 'list', data: [{ id: model, object: 'model', created: 0, owned_by: 'orchestrator' }] });
}

function health(req, res) {
  sendJson(res, 200, { status: 'ok' });
}

const routes = {
  '/health': { GET: health },
  '/v1/models': { GET: models },
  '/v1/chat/completions': { POST: chatCompletions },
  '/v1/completions': { POST: completions },
};

async function handle(req, res) {
  const { pathname } = new URL(req.url ?? '/', 'http://localhost');
  const methods = routes[pathname];
  if (!methods) throw new RequestError(404, `Unknown request URL: ${req.method} ${pathname}.`, { code: 'unknown_url' });
  const handler = methods[req.method ?? 'GET'];
  if (!handler) throw new RequestError(405, `${req.method} is not allowed on ${pathname}; use ${Object.keys(methods).join(', ')}.`, { code: 'method_not_allowed', headers: { allow: Object.keys(methods).join(', ') } });
  await handler(req, res);
}

const server = createServer((req, res) => {
  handle(req, res).catch((error) => {
    if (res.headersSent) {
      res.destroy(error);
      return;
    }
    if (error instanceof RequestError) {
      sendJson(res, error.status, error.body, error.headers);
      return;
    }
    console.error(error);
    sendJson(res, 500, { error: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: null } });
  });
});

server.listen(port, '0.0.0.0', () => {
  console.log(`echo-llm: model "${model}" listening on 0.0.0.0:${server.address().port}`);
});

// As a container's first process, Node would otherwise ignore these signals.
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
