import type { ComponentChildren } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { Gateway, GatewaySpec } from '../../../api/gateways.js';
import type { ApplyRequest, ApplyResult, FleetPlan, RunPlan } from '../../../api/objects.js';
import { describeFleetNodes } from '../../../api/fleet-rules.js';
import type { ConfigSpec, SpecError } from '../../../api/parse.js';
import type { FleetSpec, RunSpec } from '../../../api/spec.js';
import { ApiFailure, call, projectPath } from '../api.js';
import { gpuText, priceText } from '../format.js';
import { Link } from '../navigation.js';
import { runPath } from './runs.js';

type Parser = typeof import('../spec-parser.js');

/** The name the located messages give the text, as the CLI gives a file's. */
const FILE = 'apply.yml';
const EXAMPLE = `# A fleet, a run, or a gateway: several may follow each other, separated by ---
type: task
name: hello
commands:
  - echo "hello from the console"
`;

type Planned =
  | { kind: 'gateway'; spec: GatewaySpec; action: 'create' | 'update' | 'unchanged' }
  | { kind: 'fleet'; spec: FleetSpec; plan: FleetPlan }
  | { kind: 'run'; spec: RunSpec; plan: RunPlan };

/** What the browser cannot do that the CLI does: read the run's `files` and local `repos` from this machine. */
function browserProblems(specs: ConfigSpec[], parser: Parser): SpecError[] {
  return specs.flatMap((spec) => {
    if (spec.type === 'fleet' || spec.type === 'gateway') return [];
    const problems: SpecError[] = [];
    const at = (path: string, message: string) => problems.push({ file: FILE, line: null, column: null, path, message });
    if (spec.files && spec.files.length > 0) at(`${spec.name ?? spec.type}: files`, 'a browser cannot read files from your machine; apply this configuration with the CLI (orchestrator apply -f)');
    if (spec.repos?.some((entry) => parser.parseRepoEntry(entry).localPath !== null)) {
      at(`${spec.name ?? spec.type}: repos`, 'a browser cannot read a local folder; give the repo as a git URL, or apply with the CLI');
    }
    return problems;
  });
}

/** Gateways first, then fleets, then runs, as `orchestrator apply` sends them. */
function inApplyOrder(specs: ConfigSpec[], parser: Parser): ConfigSpec[] {
  const order = { gateway: 0, fleet: 1, run: 2 } as const;
  return [...specs].sort((a, b) => order[parser.specKind(a)] - order[parser.specKind(b)]);
}

/** A spec's plan from the same API calls as the CLI's: fleets and runs are planned by the server; a gateway is compared. */
async function planOne(project: string, spec: ConfigSpec, fleetsBefore: FleetSpec[]): Promise<Planned> {
  if (spec.type === 'gateway') {
    const current = await call<Gateway>('GET', `${projectPath(project)}/gateways/${encodeURIComponent(spec.name)}`).catch((failure: unknown) => {
      if (failure instanceof ApiFailure && failure.status === 404) return null;
      throw failure;
    });
    return { kind: 'gateway', spec, action: !current ? 'create' : JSON.stringify(current.spec) === JSON.stringify(spec) ? 'unchanged' : 'update' };
  }
  if (spec.type === 'fleet') return { kind: 'fleet', spec, plan: await call<FleetPlan>('POST', `${projectPath(project)}/fleets/plan`, { spec }) };
  const body = { spec, ...(fleetsBefore.length > 0 ? { fleets: fleetsBefore } : {}) };
  return { kind: 'run', spec, plan: await call<RunPlan>('POST', `${projectPath(project)}/runs/plan`, body) };
}

const unchanged = (item: Planned) => (item.kind === 'gateway' && item.action === 'unchanged') || (item.kind === 'fleet' && item.plan.action === 'unchanged');

/**
 * Apply from the browser: YAML checked as it is typed by the CLI's own parser (the same located messages), then the
 * plan from the same API calls as `orchestrator apply`, then one all-or-nothing apply.
 */
export function ApplyPage({ project }: { project: string }) {
  const [parser, setParser] = useState<Parser | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [text, setText] = useState(EXAMPLE);
  const [plans, setPlans] = useState<Planned[] | null>(null);
  const [queue, setQueue] = useState(false);
  const [busy, setBusy] = useState(false);
  const [failure, setFailure] = useState<string | null>(null);
  const [result, setResult] = useState<ApplyResult | null>(null);
  const editor = useRef<HTMLTextAreaElement>(null);
  useEffect(() => {
    import('../spec-parser.js').then(setParser, (error) => setLoadError((error as Error).message));
  }, []);
  const parsed = useMemo(() => {
    if (!parser) return null;
    const { specs, errors } = parser.parseSpecText(text, FILE, {});
    const problems = errors.length > 0 ? errors : browserProblems(specs, parser);
    return { specs: problems.length > 0 ? [] : inApplyOrder(specs, parser), errors: problems };
  }, [parser, text]);

  const edit = (value: string) => {
    setText(value);
    setPlans(null);
    setFailure(null);
  };
  /** Puts the caret where a message points, so that the keyboard goes straight to the fix. */
  const jumpTo = (error: SpecError) => {
    const area = editor.current;
    if (!area || error.line === null) return;
    const lines = text.split('\n');
    const offset = lines.slice(0, error.line - 1).reduce((sum, line) => sum + line.length + 1, 0) + (error.column ?? 1) - 1;
    area.focus();
    area.setSelectionRange(offset, offset);
  };
  const plan = async () => {
    if (!parsed) return;
    setBusy(true);
    setFailure(null);
    setResult(null);
    try {
      const planned: Planned[] = [];
      for (const spec of parsed.specs) {
        const fleetsBefore = planned.filter((item): item is Extract<Planned, { kind: 'fleet' }> => item.kind === 'fleet' && !unchanged(item)).map((item) => item.spec);
        planned.push(await planOne(project, spec, fleetsBefore));
      }
      setPlans(planned);
    } catch (error) {
      setFailure((error as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const toApply = (plans ?? []).filter((item) => !unchanged(item));
  const refused = (plans ?? []).find((item) => item.kind === 'run' && item.plan.blocking === 'name_in_use');
  const held = (plans ?? []).find((item) => item.kind === 'run' && item.plan.blocking !== null && item.plan.blocking !== 'name_in_use');
  const apply = async () => {
    setBusy(true);
    setFailure(null);
    try {
      const request: ApplyRequest = { items: toApply.map((item) => ({ spec: item.spec })) };
      setResult(await call<ApplyResult>('POST', `${projectPath(project)}/apply`, request));
      setPlans(null);
    } catch (error) {
      // The server names an item by its place in the request; say which configuration that is.
      setFailure((error as Error).message.replace(/items\[(\d+)\]/g, (whole, index: string) => {
        const item = toApply[Number(index)];
        return item ? `${item.spec.type} ${item.spec.name ?? ''}`.trim() : whole;
      }));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="apply">
      <div class="toolbar"><h2>Apply</h2><span class="muted">Paste or write a configuration; it is checked as you type, as <code>orchestrator apply</code> checks it.</span></div>
      <label class="editor-label" for="apply-yaml">Configuration (YAML)</label>
      <textarea id="apply-yaml" ref={editor} class="editor" spellcheck={false} rows={16} value={text}
        onInput={(event) => edit((event.target as HTMLTextAreaElement).value)} />
      <div class="checks" aria-live="polite">
        {loadError ? <p class="error" role="alert">The checker did not load: {loadError}</p>
          : !parsed ? <p class="muted">Loading the checker…</p>
            : parsed.errors.length > 0 ? (
              <ul class="spec-errors">
                {parsed.errors.map((error) => (
                  <li key={`${error.line}:${error.column}:${error.path}:${error.message}`}>
                    <button class="locate" onClick={() => jumpTo(error)} disabled={error.line === null}>{parser!.formatSpecError(error)}</button>
                  </li>
                ))}
              </ul>
            ) : <p class="ok">Valid: {parsed.specs.map((spec) => `${spec.type} ${spec.name ?? '(a name will be generated)'}`).join(', ')}.</p>}
      </div>
      <div class="toolbar">
        <button class="primary" disabled={!parsed || parsed.errors.length > 0 || parsed.specs.length === 0 || busy} onClick={() => void plan()}>Show plan</button>
        {plans && (
          <>
            {held && <label><input type="checkbox" checked={queue} onChange={(event) => setQueue((event.target as HTMLInputElement).checked)} /> submit it anyway: {held.spec.type} {held.spec.name ?? ''} waits in the queue, or fails</label>}
            <button class="primary" disabled={busy || toApply.length === 0 || refused !== undefined || (held !== undefined && !queue)} onClick={() => void apply()}>Apply</button>
          </>
        )}
      </div>
      {failure && <p class="error" role="alert">{failure}</p>}
      {plans && <PlanView plans={plans} nothing={toApply.length === 0} />}
      {result && <Applied project={project} result={result} />}
    </section>
  );
}

function Fact({ label, children }: { label: string; children: ComponentChildren }) {
  return <><dt>{label}</dt><dd>{children}</dd></>;
}

function PlanView({ plans, nothing }: { plans: Planned[]; nothing: boolean }) {
  return (
    <div class="plans">
      <h3>Plan</h3>
      {nothing && <p class="notice">Everything here is already applied as written; nothing would change.</p>}
      {plans.map((item) => {
        if (item.kind === 'gateway') {
          return (
            <div class="plan" key={`gateway/${item.spec.name}`} data-plan={item.spec.name}>
              <h4>gateway {item.spec.name}: {item.action === 'update' ? 'update (its process restarts)' : item.action}</h4>
              <dl class="facts"><Fact label="domain">{item.spec.domain}</Fact><Fact label="backend">{item.spec.backend ?? 'local'}</Fact></dl>
            </div>
          );
        }
        const { plan } = item;
        const action = item.kind === 'fleet'
          ? plan.action === 'update' ? `update (generation ${item.plan.currentGeneration} → ${(item.plan.currentGeneration ?? 0) + 1})` : plan.action
          : item.plan.blocking === 'name_in_use' ? 'replace (refused while the run of that name is active)' : item.plan.action;
        return (
          <div class="plan" key={`${item.kind}/${item.spec.name}`} data-plan={item.spec.name ?? ''}>
            <h4>{item.spec.type} {item.kind === 'run' ? item.plan.name ?? '(a name will be generated)' : item.plan.name}: {action}</h4>
            <dl class="facts">
              <Fact label="resources">{plan.requirement}</Fact>
              {item.kind === 'fleet' && <Fact label="nodes">{item.spec.nodes === undefined ? 'its hosts' : describeFleetNodes(item.spec.nodes)}</Fact>}
              {item.kind === 'run' && <Fact label="fleets">{item.plan.fleets.length > 0 ? item.plan.fleets.join(', ') : 'none match'}</Fact>}
              {item.kind === 'run' && item.plan.instance && <Fact label="instance">{item.plan.instance.name ?? `an ${item.plan.instance.state} instance`} ({item.plan.instance.state}, fleet {item.plan.instance.fleet}{item.plan.instance.gpu?.count ? `, ${gpuText(item.plan.instance.gpu)}` : ''})</Fact>}
              {item.kind === 'run' && item.plan.queuedBefore > 0 && <Fact label="queue">{item.plan.queuedBefore} queued before it</Fact>}
              {item.kind === 'run' && item.plan.schedule && <Fact label="schedule">{item.plan.schedule.cron.join(', ')} (UTC), next at {new Date(item.plan.schedule.nextRunAt).toString()}</Fact>}
              {plan.offers.length > 0 && <Fact label="offers">{plan.offersTotal} match; cheapest: {plan.offers.slice(0, 3).map((offer) => [offer.backend, offer.gpu.count ? gpuText(offer.gpu) : 'no GPU', offer.region, priceText(offer.pricePerHour)].join(' ')).join(' · ')}</Fact>}
              {item.kind === 'run' && item.plan.notActedOn.map((field) => <Fact key={field.field} label="ignored">{field.field}: {field.message}</Fact>)}
              {plan.offerErrors.map((line) => <Fact key={line} label="warning">{line}</Fact>)}
              {plan.problem && <Fact label="problem"><span class="error">{plan.problem}</span></Fact>}
            </dl>
          </div>
        );
      })}
    </div>
  );
}

function Applied({ project, result }: { project: string; result: ApplyResult }) {
  const base = `/projects/${encodeURIComponent(project)}`;
  return (
    <div class="notice applied" role="status">
      <h3>Applied</h3>
      <ul>{result.items.map((item) => (
        item.kind === 'run' ? <li key={item.run.id}>{item.run.kind} <Link to={runPath(project, item.run.name)}>{item.run.name}</Link> submitted</li>
          : item.kind === 'fleet' ? <li key={item.fleet.id}>fleet <Link to={`${base}/fleets`}>{item.fleet.name}</Link>: {item.action === 'create' ? 'created' : item.action === 'update' ? `updated to generation ${item.fleet.generation}` : 'already up to date'}</li>
            : <li key={item.gateway.id}>gateway <Link to={`${base}/gateways`}>{item.gateway.name}</Link>: {item.action === 'create' ? 'created' : item.action === 'update' ? 'updated' : 'already up to date'}</li>
      ))}</ul>
    </div>
  );
}
