import { request } from 'node:http';
import WebSocket from 'ws';

/** A request sent with its path exactly as written: fetch would resolve `..` before sending. */
export function rawGet(base: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject).end();
  });
}

/** The status a WebSocket upgrade was refused with, or 101 when it opened. */
export function upgradeStatus(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { headers });
    socket.once('open', () => {
      socket.close();
      resolve(101);
    });
    socket.once('unexpected-response', (_req, res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    socket.once('error', reject);
  });
}

/** Reads a stream of Server-Sent Events whose data is JSON, noting when each event arrived. */
export async function eventArrivals<T extends object>(response: Response): Promise<Array<T & { arrivedAt: number }>> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  const events: Array<T & { arrivedAt: number }> = [];
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return events;
    buffered += value;
    let end: number;
    while ((end = buffered.indexOf('\n\n')) >= 0) {
      events.push({ ...JSON.parse(buffered.slice('data: '.length, end)) as T, arrivedAt: Date.now() });
      buffered = buffered.slice(end + 2);
    }
  }
}
