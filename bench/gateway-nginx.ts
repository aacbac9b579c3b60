/** Debian's nginx as the reference reverse proxy of the gateway benchmark, with its own folder and configuration. */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const NGINX = '/usr/sbin/nginx';

/**
 * One worker, like our server's one event loop; a keep-alive pool to the upstream, HTTP/1.1 to it and no
 * buffering, as a reverse proxy for a streaming service is set up; no access log, as our proxy keeps none.
 */
function configuration(dir: string, port: number, upstreamPort: number): string {
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
    listen 127.0.0.1:${port};
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
  stop(): Promise<void>;
}

export async function startNginx(dir: string, port: number, upstreamPort: number): Promise<RunningNginx> {
  mkdirSync(dir, { recursive: true });
  const config = join(dir, 'nginx.conf');
  writeFileSync(config, configuration(dir, port, upstreamPort));
  const child: ChildProcess = spawn(NGINX, ['-e', join(dir, 'error.log'), '-c', config, '-p', dir, '-g', 'daemon off;'], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}/`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  for (let attempt = 0; ; attempt++) {
    if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}: ${readFileSync(join(dir, 'error.log'), 'utf8')}`);
    if (await fetch(url).then((response) => response.ok, () => false)) break;
    if (attempt === 100) throw new Error(`nginx did not answer on ${url} within 10 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    stop: async () => {
      child.kill('SIGQUIT');
      await exited;
    },
  };
}
