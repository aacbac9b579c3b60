import type { AgentMetrics } from '../../api/agent.js';
import type { Run } from '../../api/objects.js';
import type { ServiceStatsSeries } from '../../api/services.js';
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, call, projectPath } from './api.js';
import { TimeChart } from './time-chart.js';

/** How often the page asks for the run's metrics, and how far back it charts them (the agent keeps an hour). */
const SAMPLE_MS = 2000;
const KEPT_MS = 60 * 60_000;
const SERVICE_WINDOW_SECONDS = 600;
const SERVICE_STEP_SECONDS = 10;

/** A job of the run whose instance is measured: the run itself, a replica of a service, or a node of a multi-node task. */
interface Measured {
  query: string;
  label: string;
}

function measuredJobs(run: Run): Measured[] {
  if (run.service) {
    return run.service.replicas.filter((replica) => ['starting', 'ready', 'draining'].includes(replica.state))
      .map((replica) => ({ query: `?replica=${replica.replica}`, label: `replica ${replica.replica}` }));
  }
  if (run.nodes) return run.nodes.filter((node) => node.status === 'running').map((node) => ({ query: `?node=${node.rank}`, label: `node ${node.rank}` }));
  return run.status === 'running' ? [{ query: '', label: run.name }] : [];
}

/**
 * CPU, memory and each GPU's utilisation and memory over time: the samples the instance's agent took in the
 * background while the job ran (every five seconds, the last hour), then the page's own, every two seconds.
 */
export function RunMetricsCharts({ project, run }: { project: string; run: Run }) {
  const jobs = measuredJobs(run);
  const [picked, setPicked] = useState<string | null>(null);
  const job = jobs.find((candidate) => candidate.query === picked) ?? jobs[0];
  const [samples, setSamples] = useState<AgentMetrics[]>([]);
  const [problem, setProblem] = useState<string | null>(null);
  const path = `${projectPath(project)}/runs/${encodeURIComponent(run.name)}/metrics${job?.query ?? ''}`;

  useEffect(() => {
    setSamples([]);
    setProblem(null);
    if (!job) return;
    let stopped = false;
    let timer: ReturnType<typeof setInterval> | undefined;
    const sample = () => call<AgentMetrics>('GET', path).then((metrics) => {
      if (stopped) return;
      setProblem(null);
      const since = Date.parse(metrics.ts) - KEPT_MS;
      setSamples((previous) => [...previous.filter((kept) => kept.ts !== metrics.ts && Date.parse(kept.ts) >= since), metrics]);
    }, (failure) => { if (!stopped) setProblem(failure instanceof ApiFailure ? failure.message : String(failure)); });
    // What the agent measured before the page opened, then new samples after it.
    const [metricsPath, query] = path.split('?');
    void call<AgentMetrics[]>('GET', `${metricsPath}/history${query ? `?${query}` : ''}`).then(
      (past) => { if (!stopped) setSamples(past); }, () => undefined,
    ).finally(() => {
      if (stopped) return;
      void sample();
      timer = setInterval(sample, SAMPLE_MS);
    });
    return () => {
      stopped = true;
      clearInterval(timer);
    };
  }, [path, !!job]);

  const times = samples.map((sample) => Date.parse(sample.ts) / 1000);
  const gpus = samples.at(-1)?.gpus ?? [];
  const gpuValues = (read: (gpu: AgentMetrics['gpus'][number]) => number) =>
    gpus.map((gpu) => samples.map((sample) => { const same = sample.gpus.find((one) => one.index === gpu.index); return same ? read(same) : null; }));
  return (
    <div class="metrics">
      <div class="toolbar">
        <h3>Metrics</h3>
        {jobs.length > 1 && (
          <label>Of <select value={job?.query} onChange={(event) => setPicked((event.target as HTMLSelectElement).value)}>
            {jobs.map((one) => <option value={one.query}>{one.label}</option>)}
          </select></label>
        )}
        <span class="muted">{!job ? 'metrics exist while the run runs' : problem ?? `sampled by the instance's agent every 5 s while the job runs (the last hour), and every ${SAMPLE_MS / 1000} s while this page is open`}</span>
      </div>
      <div class="charts">
        <TimeChart title="CPU" unit="%" max={100} series={[{ label: 'CPU' }]} times={times} values={[samples.map((sample) => sample.cpuPercent)]} />
        <TimeChart title="Memory" unit=" GiB" max={samples.length ? samples.at(-1)!.memoryTotalMib / 1024 : undefined} series={[{ label: 'used' }]}
          times={times} values={[samples.map((sample) => sample.memoryUsedMib / 1024)]} />
        {gpus.length > 0 ? (
          <>
            <TimeChart title="GPU utilisation" unit="%" max={100} series={gpus.map((gpu) => ({ label: `GPU ${gpu.index}` }))} times={times} values={gpuValues((gpu) => gpu.utilizationPercent)} />
            <TimeChart title="GPU memory" unit=" GiB" max={Math.max(...gpus.map((gpu) => gpu.memoryTotalMib)) / 1024 || undefined}
              series={gpus.map((gpu) => ({ label: `GPU ${gpu.index}` }))} times={times} values={gpuValues((gpu) => gpu.memoryUsedMib / 1024)} />
          </>
        ) : <div class="chart chart-empty muted">{samples.length ? 'No GPUs on this instance.' : 'GPUs are charted from the first sample.'}</div>}
      </div>
    </div>
  );
}

/** A service's requests per second, p50 and p99 latency and error rate over the last ten minutes, read again every step. */
export function ServiceCharts({ project, run }: { project: string; run: Run }) {
  const [series, setSeries] = useState<ServiceStatsSeries | null>(null);
  const path = `${projectPath(project)}/services/${encodeURIComponent(run.name)}/stats/series?window=${SERVICE_WINDOW_SECONDS}&step=${SERVICE_STEP_SECONDS}`;
  useEffect(() => {
    let stopped = false;
    const read = () => call<ServiceStatsSeries>('GET', path).then((answer) => { if (!stopped) setSeries(answer); }, () => undefined);
    void read();
    const timer = setInterval(read, SERVICE_STEP_SECONDS * 1000 / 2);
    return () => {
      stopped = true;
      clearInterval(timer);
    };
  }, [path]);
  const points = series?.points ?? [];
  const times = points.map((point) => Date.parse(point.at) / 1000);
  return (
    <div class="metrics">
      <div class="toolbar"><h3>Requests</h3><span class="muted">the last {SERVICE_WINDOW_SECONDS / 60} minutes, in steps of {SERVICE_STEP_SECONDS} s, through every gateway</span></div>
      <div class="charts">
        <TimeChart title="Requests per second" unit="/s" series={[{ label: 'req/s' }]} times={times} values={[points.map((point) => point.requestsPerSecond)]} />
        <TimeChart title="Latency" unit=" ms" series={[{ label: 'p50' }, { label: 'p99' }]} times={times} values={[points.map((point) => point.p50Ms), points.map((point) => point.p99Ms)]} />
        <TimeChart title="Error rate" unit="%" series={[{ label: 'errors' }]} times={times} values={[points.map((point) => point.errorRate * 100)]} />
      </div>
    </div>
  );
}
