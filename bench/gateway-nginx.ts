/** Debian's nginx as the reference reverse proxy of the gateway benchmark, with its own folder and configuration. */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
import { join } from 'node:path';

export const NGINX = '/usr/sbin/nginx';

/** A certificate and its key, as PEM files, for nginx to terminate TLS with. */
export interface NginxTls {
  certFile: string;
  keyFile: string;
}

/**
 * One worker, like our server's one event loop; a keep-alive pool to the upstream, HTTP/1.1 to it and no
 * buffering, as a reverse proxy for a streaming service is set up; no access log, as our proxy keeps none.
 * With `tls`, it terminates TLS, with nginx's default protocols and ciphers, in front of the same upstream.
 */
function configuration(dir: string, port: number, upstreamPort: number, tls: NginxTls | undefined): string {
  return `worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream service {
    server 127.0.0.1:${upstreamPort};
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${port}${tls ? ' ssl' : ''};${tls ? `
    ssl_certificate ${tls.certFile};
    ssl_certificate_key ${tls.keyFile};` : ''}
    location / {
      proxy_pass http://service;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}

export interface RunningNginx {
  url: string;
  /** The one worker's process, which does the proxying (the master only starts it). */
  workerPid: number;
  stop(): Promise<void>;
}

/** Whether a GET of the URL answers 2xx; a self-signed certificate is taken as it is. */
function answers(url: string): Promise<boolean> {
  const get = url.startsWith('https:') ? httpsGet : httpGet;
  return new Promise((resolve) => {
    get(url, { rejectUnauthorized: false }, (response) => {
      response.resume();
      resolve((response.statusCode ?? 0) < 300);
    }).on('error', () => resolve(false));
  });
}

export async function startNginx(dir: string, port: number, upstreamPort: number, tls?: NginxTls): Promise<RunningNginx> {
  mkdirSync(dir, { recursive: true });
  const config = join(dir, 'nginx.conf');
  writeFileSync(config, configuration(dir, port, upstreamPort, tls));
  const child: ChildProcess = spawn(NGINX, ['-e', join(dir, 'error.log'), '-c', config, '-p', dir, '-g', 'daemon off;'], { stdio: 'ignore' });
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}/`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  for (let attempt = 0; ; attempt++) {
    if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}: ${readFileSync(join(dir, 'error.log'), 'utf8')}`);
    if (await answers(url)) break;
    if (attempt === 100) throw new Error(`nginx did not answer on ${url} within 10 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const [workerPid] = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(' ').map(Number);
  return {
    url,
    workerPid: workerPid!,
    stop: async () => {
      child.kill('SIGQUIT');
      await exited;
    },
  };
}
