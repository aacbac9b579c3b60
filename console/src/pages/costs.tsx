import { useState } from 'preact/hooks';
import type { ConsoleSession, Member } from '../../../api/objects.js';
import { BUDGET_PERIODS, COST_GROUPS, DEFAULT_ALERTS, ON_EXCEED, type BudgetView, type CostReport } from '../../../api/costs.js';
import { formatDuration } from '../../../api/duration.js';
import { formatDollars } from '../../../api/offer.js';
import type { CreatedWebhook, Webhook, WebhookDelivery } from '../../../api/webhooks.js';
import { call, projectPath } from '../api.js';
import { ConfirmButton } from '../confirm-button.js';
import { Age, useNow } from '../format.js';
import { setQueryFilters } from '../query-filters.js';
import { useApi } from '../use-api.js';
import { useSubmit } from '../use-submit.js';

/** Windows the report offers besides a calendar month. */
const SINCE = ['24h', '7d', '30d'];
/** Money moves every ledger count (15 s): the page reads it again this often. */
const REFRESH_MS = 15_000;

/**
 * What the project has cost (the ledger's report, grouped and windowed in the URL), its budget and its webhooks. Admins of
 * the project, and global admins, set the budget and manage webhooks; others read the budget (the server refuses them anyway).
 */
export function CostsPage({ project, session, query }: { project: string; session: ConsoleSession; query: URLSearchParams }) {
  const members = useApi<Member[]>(`${projectPath(project)}/members`);
  const me = members.data?.find((member) => member.user === session.user.name);
  const admin = session.user.admin || me?.role === 'admin';
  return (
    <section class="costs">
      <div class="toolbar"><h2>Costs of {project}</h2></div>
      <Report project={project} query={query} />
      <BudgetPanel project={project} admin={admin} />
      {admin ? <Webhooks project={project} /> : (
        <div class="panel" id="webhooks"><h3>Webhooks</h3><p class="muted">Only the project's admins see and change its webhooks.</p></div>
      )}
    </section>
  );
}

function Report({ project, query }: { project: string; query: URLSearchParams }) {
  const by = query.get('by') ?? 'run';
  const month = query.get('month') ?? '';
  const since = month ? '' : query.get('since') ?? '30d';
  const window = month ? `month=${encodeURIComponent(month)}` : `since=${encodeURIComponent(since)}`;
  const { data: report, error } = useApi<CostReport>(`${projectPath(project)}/costs?by=${encodeURIComponent(by)}&${window}`, REFRESH_MS);
  const setMonth = (value: string) => setQueryFilters({ since: '', month: value });
  return (
    <div class="panel" id="cost-report">
      <div class="toolbar">
        <h3>Spent</h3>
        <label>By <select value={by} onChange={(event) => setQueryFilters({ by: (event.target as HTMLSelectElement).value })}>
          {COST_GROUPS.map((value) => <option value={value}>{value}</option>)}
        </select></label>
        <label>Since <select value={since} onChange={(event) => setQueryFilters({ month: '', since: (event.target as HTMLSelectElement).value })}>
          {month && <option value="">—</option>}
          {SINCE.map((value) => <option value={value}>{value}</option>)}
        </select></label>
        <label>Month <input type="month" value={month} onChange={(event) => setMonth((event.target as HTMLInputElement).value)} /></label>
      </div>
      {error && <p class="error" role="alert">{error}</p>}
      {report === null ? <p class="muted">Loading costs…</p> : (
        <>
          <p class="total">Total <strong>{formatDollars(report.total)}</strong>
            <span class="muted"> from {report.since.slice(0, 16).replace('T', ' ')} to {report.until.slice(0, 16).replace('T', ' ')} UTC</span></p>
          {report.rows.length === 0 ? <p class="empty">Nothing spent in this window: instances cost from when their backend creates them.</p> : (
            <table class="cost-rows">
              <thead><tr><th>{by}</th><th class="number" title="instance time; a run on part of an instance counts its share">Instance time</th><th class="number">Dollars</th></tr></thead>
              <tbody>
                {report.rows.map((row) => (
                  <tr key={row.name} data-cost={row.name}>
                    <td>{row.name === '-' ? <span title="time no run held an instance, charged to its fleet">- <span class="muted">(no run: the fleets' own time)</span></span> : row.name}</td>
                    <td class="number">{formatDuration(row.seconds)}</td>
                    <td class="number">{formatDollars(row.dollars)}</td>
                  </tr>
                ))}
                {report.others.count > 0 && (
                  <tr class="muted"><td>{report.others.count} more</td><td class="number">{formatDuration(report.others.seconds)}</td><td class="number">{formatDollars(report.others.dollars)}</td></tr>
                )}
              </tbody>
            </table>
          )}
        </>
      )}
    </div>
  );
}

function BudgetPanel({ project, admin }: { project: string; admin: boolean }) {
  const path = `${projectPath(project)}/budget`;
  const { data: view, error, reload } = useApi<BudgetView>(path, REFRESH_MS);
  const budget = view?.budget ?? null;
  return (
    <div class="panel" id="budget">
      <h3>Budget</h3>
      {error && <p class="error" role="alert">{error}</p>}
      {view === null ? <p class="muted">Loading the budget…</p> : budget === null ? (
        <p class="empty">No budget: nothing stops this project's spending.{admin ? ' Set one below.' : ' An admin of the project can set one.'}</p>
      ) : (
        <>
          <p class="budget-standing">
            <strong>{formatDollars(view.spent)}</strong> of {formatDollars(budget.amount)} spent this {budget.period}
            {view.periodEnd && <span class="muted"> (resets {view.periodEnd.slice(0, 10)})</span>}; now {formatDollars(view.burnPerHour)}/h
          </p>
          <meter min={0} max={budget.amount || 1} value={Math.min(view.spent, budget.amount || 1)} aria-label="budget spent" />
          {view.holding && <p class="reason" role="status">{view.holding}</p>}
          <dl class="facts">
            <dt>When spent</dt><dd>{budget.on_exceed}</dd>
            <dt>Alerts at</dt><dd>{budget.alerts.map((percent) => `${percent}%`).join(', ')}</dd>
            <dt>Set by</dt><dd>{view.source === 'config' ? 'config.yml (wins at restart)' : 'the API'}</dd>
          </dl>
          {admin && <ConfirmButton label="Remove budget" question={`Remove the budget of ${project}?`} yes="Yes, remove"
            act={async () => { await call('DELETE', path); reload(); }} />}
        </>
      )}
      {admin && view !== null && <BudgetForm key={JSON.stringify(budget)} path={path} view={view} saved={reload} />}
    </div>
  );
}

function BudgetForm({ path, view, saved }: { path: string; view: BudgetView; saved: () => void }) {
  const [amount, setAmount] = useState(view.budget ? String(view.budget.amount) : '');
  const [period, setPeriod] = useState<string>(view.budget?.period ?? 'month');
  const [onExceed, setOnExceed] = useState<string>(view.budget?.on_exceed ?? 'warn');
  const [alerts, setAlerts] = useState((view.budget?.alerts ?? DEFAULT_ALERTS).join(', '));
  const form = useSubmit();
  const send = async () => {
    const percents = alerts.split(/[,\s]+/).filter(Boolean).map(Number);
    await call('PUT', path, { amount: amount.trim() === '' ? null : Number(amount), period, on_exceed: onExceed, alerts: percents });
    saved();
  };
  return (
    <form class="inline-form budget-form" onSubmit={(event) => { event.preventDefault(); void form.submit(send); }}>
      <label>Dollars <input inputMode="decimal" required value={amount} placeholder="500" onInput={(event) => setAmount((event.target as HTMLInputElement).value)} /></label>
      <label>Per <select value={period} onChange={(event) => setPeriod((event.target as HTMLSelectElement).value)}>
        {BUDGET_PERIODS.map((value) => <option value={value}>{value}</option>)}
      </select></label>
      <label>When spent <select value={onExceed} onChange={(event) => setOnExceed((event.target as HTMLSelectElement).value)}>
        {ON_EXCEED.map((value) => <option value={value}>{value}</option>)}
      </select></label>
      <label>Alerts (%) <input value={alerts} onInput={(event) => setAlerts((event.target as HTMLInputElement).value)} /></label>
      <button class="primary" disabled={form.busy}>{view.budget ? 'Change budget' : 'Set budget'}</button>
      {form.error && <span class="error" role="alert">{form.error}</span>}
    </form>
  );
}

function Webhooks({ project }: { project: string }) {
  const now = useNow(10_000);
  const path = `${projectPath(project)}/webhooks`;
  const hooks = useApi<Webhook[]>(path);
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState('run.failed, run.done, budget.*');
  const [created, setCreated] = useState<CreatedWebhook | null>(null);
  const [shown, setShown] = useState<string | null>(null);
  const form = useSubmit();
  const add = async () => {
    setCreated(await call<CreatedWebhook>('POST', path, { url: url.trim(), events: events.split(/[,\s]+/).filter(Boolean) }));
    setUrl('');
    hooks.reload();
  };
  return (
    <div class="panel" id="webhooks">
      <h3>Webhooks</h3>
      <p class="muted">Each event is POSTed as JSON, signed with the webhook's secret (docs/costs.md says how to check it).</p>
      {created && (
        <div class="notice" role="status" data-secret-shown>
          <p>Webhook added. Its signing secret is shown this once; keep it where the receiver can read it:</p>
          <pre>{created.secret}</pre>
          <button onClick={() => setCreated(null)}>I have kept it</button>
        </div>
      )}
      {hooks.error && <p class="error" role="alert">{hooks.error}</p>}
      {hooks.data && (hooks.data.length === 0 ? <p class="empty">No webhooks yet. Add one below to hear of failed runs and spent budgets.</p> : (
        <table class="webhooks">
          <thead><tr><th>URL</th><th>Events</th><th>Added</th><th></th></tr></thead>
          <tbody>{hooks.data.map((hook) => (
            <tr key={hook.id} data-webhook={hook.url}>
              <td><code>{hook.url}</code></td>
              <td>{hook.events.join(', ')}</td>
              <td><Age at={hook.createdAt} now={now} /></td>
              <td class="actions-cell">
                <button aria-expanded={shown === hook.id} onClick={() => setShown(shown === hook.id ? null : hook.id)}>{shown === hook.id ? 'Hide deliveries' : 'Deliveries'}</button>{' '}
                <ConfirmButton label="Delete" question={`Delete the webhook to ${hook.url}?`} yes="Yes, delete"
                  act={async () => { await call('DELETE', `${path}/${hook.id}`); if (shown === hook.id) setShown(null); hooks.reload(); }} />
              </td>
            </tr>
          ))}</tbody>
        </table>
      ))}
      {shown && hooks.data?.some((hook) => hook.id === shown) && <Deliveries path={`${path}/${shown}/deliveries`} now={now} />}
      <form class="inline-form" onSubmit={(event) => { event.preventDefault(); void form.submit(add); }}>
        <label>URL <input type="url" required value={url} placeholder="https://hooks.example.com/orchestrator" onInput={(event) => setUrl((event.target as HTMLInputElement).value)} /></label>
        <label>Events <input required value={events} onInput={(event) => setEvents((event.target as HTMLInputElement).value)} /></label>
        <button class="primary" disabled={form.busy}>Add webhook</button>
        {form.error && <span class="error" role="alert">{form.error}</span>}
      </form>
    </div>
  );
}

function Deliveries({ path, now }: { path: string; now: number }) {
  const { data: deliveries, error } = useApi<WebhookDelivery[]>(path, 5000);
  return (
    <div class="deliveries">
      <h4>Deliveries</h4>
      {error && <p class="error" role="alert">{error}</p>}
      {deliveries === null ? <p class="muted">Loading deliveries…</p> : deliveries.length === 0 ? <p class="empty">No deliveries yet: none of its events has happened since it was added.</p> : (
        <table class="deliveries">
          <thead><tr><th>Event</th><th>Status</th><th>Tries</th><th>Last answer</th><th class="number">Latency</th><th>Created</th></tr></thead>
          <tbody>{deliveries.map((delivery) => {
            const last = delivery.tries.at(-1);
            return (
              <tr key={delivery.id} data-delivery={delivery.type}>
                <td>{delivery.type}</td>
                <td><span class={`status status-${delivery.status}`}>{delivery.status}</span></td>
                <td class="number">{delivery.tries.length}</td>
                <td>{last ? (last.statusCode ?? last.error ?? 'no answer') : '—'}</td>
                <td class="number">{last ? `${last.latencyMs} ms` : '—'}</td>
                <td><Age at={delivery.createdAt} now={now} /></td>
              </tr>
            );
          })}</tbody>
        </table>
      )}
    </div>
  );
}
