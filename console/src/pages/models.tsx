import type { ModelList } from '../../../api/gateway.js';
import { useEffect, useState } from 'preact/hooks';
import { csrfHeader } from '../api.js';

interface ChatMessage {
  role: 'user' | 'assistant';
  content: string;
}

const endpoint = (project: string) => `/proxy/models/${encodeURIComponent(project)}/v1`;

/** The OpenAI error shape the model endpoint answers with. */
async function failureOf(response: Response): Promise<string> {
  const body = await response.json().catch(() => null) as { error?: { message?: string } } | null;
  return body?.error?.message ?? `the model endpoint answered ${response.status}`;
}

/**
 * The project's model endpoint: the models its services declare, and a chat that streams each answer through
 * `/proxy/models/<project>/v1/chat/completions` as any OpenAI client would (with the session cookie and its CSRF header).
 */
export function ModelsPage({ project }: { project: string }) {
  const [models, setModels] = useState<ModelList['data'] | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const [model, setModel] = useState('');
  const [messages, setMessages] = useState<ChatMessage[]>([]);
  const [prompt, setPrompt] = useState('');
  const [answering, setAnswering] = useState<AbortController | null>(null);
  const base = endpoint(project);

  useEffect(() => {
    setModels(null);
    setProblem(null);
    const read = async () => {
      const response = await fetch(`${base}/models`, { credentials: 'same-origin' });
      if (!response.ok) throw new Error(await failureOf(response));
      const list = await response.json() as ModelList;
      setModels(list.data);
      setModel((current) => current && list.data.some((entry) => entry.id === current) ? current : list.data[0]?.id ?? '');
    };
    read().catch((failure: Error) => setProblem(failure.message));
  }, [base]);

  const send = async (event: Event) => {
    event.preventDefault();
    if (!prompt.trim() || !model || answering) return;
    const asked: ChatMessage[] = [...messages, { role: 'user', content: prompt }];
    setMessages([...asked, { role: 'assistant', content: '' }]);
    setPrompt('');
    setProblem(null);
    const abort = new AbortController();
    setAnswering(abort);
    const answer = (update: (content: string) => string) => setMessages((shown) => [...shown.slice(0, -1), { role: 'assistant', content: update(shown.at(-1)!.content) }]);
    try {
      const response = await fetch(`${base}/chat/completions`, {
        method: 'POST', credentials: 'same-origin', signal: abort.signal,
        headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...csrfHeader() },
        body: JSON.stringify({ model, messages: asked, stream: true }),
      });
      if (!response.ok || !response.body) throw new Error(await failureOf(response));
      await readChunks(response.body, (delta) => answer((content) => content + delta));
    } catch (failure) {
      if (!abort.signal.aborted) setProblem((failure as Error).message);
    } finally {
      setAnswering(null);
    }
  };

  if (models === null) return problem ? <p class="error" role="alert">{problem}</p> : <p class="muted">Loading…</p>;
  return (
    <section class="models">
      <div class="toolbar"><h2>Models</h2><span class="muted">OpenAI-compatible endpoint: <code>{location.origin}{base}</code></span></div>
      {models.length === 0 ? (
        <div class="empty">
          <p>No model in this project yet.</p>
          <p>A service with <code>model: NAME</code> in its configuration appears here: <code>orchestrator apply -f examples/services/echo-llm.yml</code></p>
        </div>
      ) : (
        <>
          <table class="model-list">
            <thead><tr><th>Model</th><th>Owned by</th></tr></thead>
            <tbody>{models.map((entry) => <tr key={entry.id} data-model={entry.id}><td>{entry.id}</td><td>{entry.owned_by}</td></tr>)}</tbody>
          </table>
          <h3>Playground</h3>
          <div class="chat" role="log" aria-live="polite">
            {messages.length === 0 && <p class="muted">Ask the model something; its answer streams in as it is written.</p>}
            {messages.map((message, index) => (
              <div key={index} class={`chat-message chat-message-${message.role}`}><span class="speaker">{message.role === 'user' ? 'You' : model}</span><p>{message.content}</p></div>
            ))}
          </div>
          {problem && <p class="error" role="alert">{problem}</p>}
          <form class="chat-form" onSubmit={send}>
            <label>Model <select value={model} onChange={(event) => setModel((event.target as HTMLSelectElement).value)}>
              {models.map((entry) => <option value={entry.id}>{entry.id}</option>)}
            </select></label>
            <input class="prompt" aria-label="Message" placeholder="Message" value={prompt} onInput={(event) => setPrompt((event.target as HTMLInputElement).value)} />
            {answering ? <button type="button" onClick={() => answering.abort()}>Stop</button> : <button type="submit" class="primary" disabled={!prompt.trim()}>Send</button>}
            <button type="button" onClick={() => setMessages([])} disabled={!!answering || messages.length === 0}>Clear</button>
          </form>
        </>
      )}
    </section>
  );
}

/** Reads an OpenAI chat completion stream (server-sent events), giving each content delta as it comes. */
async function readChunks(body: NonNullable<Response['body']>, onDelta: (text: string) => void): Promise<void> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    const events = (rest + value).split(/\r?\n\r?\n/);
    rest = events.pop()!;
    for (const event of events) {
      const data = event.split(/\r?\n/).filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim()).join('\n');
      if (data === '') continue;
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data) as { choices?: Array<{ delta?: { content?: string | null } }>; error?: { message?: string } };
      if (chunk.error) throw new Error(chunk.error.message ?? 'the model failed');
      const delta = chunk.choices?.[0]?.delta?.content;
      if (delta) onDelta(delta);
    }
  }
}
