import type { ConsoleSession, Project } from '../../api/objects.js';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { call, currentSession, signOut, whenSignedOut } from './api.js';
import { useLiveRuns } from './live-runs.js';
import { Link, navigate, useLocation } from './navigation.js';
import { ApplyPage } from './pages/apply.js';
import { CostsPage } from './pages/costs.js';
import { EventsPage } from './pages/events.js';
import { FleetsPage } from './pages/fleets.js';
import { GatewaysPage } from './pages/gateways.js';
import { ModelsPage } from './pages/models.js';
import { OffersPage } from './pages/offers.js';
import { SettingsPage } from './pages/settings.js';
import { RunPage } from './pages/run.js';
import { RunsPage } from './pages/runs.js';
import { SignInPage } from './pages/sign-in.js';
import { UsersPage } from './pages/users.js';
import './style.css';

const PROJECT_PAGE = /^\/projects\/([^/]+)\/(runs|fleets|models|offers|events|gateways|apply|settings|costs)(?:\/([^/]+))?\/?$/;
/** Pages of a project after Runs and Fleets, in the navigation's order. */
const MORE_PROJECT_PAGES = [['models', 'Models'], ['offers', 'Offers'], ['events', 'Events'], ['gateways', 'Gateways'], ['apply', 'Apply'], ['settings', 'Settings'], ['costs', 'Costs']] as const;

function App() {
  const [session, setSession] = useState<ConsoleSession | null | undefined>(undefined);
  const [notice, setNotice] = useState<string | null>(null);
  const [startError, setStartError] = useState<string | null>(null);
  useEffect(() => {
    whenSignedOut(() => {
      setSession(null);
      setNotice('Your session has ended (it expired or was signed out). Sign in again.');
    });
    currentSession().then(setSession, (failure) => setStartError((failure as Error).message));
  }, []);
  if (startError) return <p class="error" role="alert">The server could not be reached: {startError}</p>;
  if (session === undefined) return null;
  if (session === null) return <SignInPage notice={notice} onSignedIn={(signedIn) => { setNotice(null); setSession(signedIn); }} />;
  return <SignedIn session={session} onSignOut={() => void signOut().finally(() => { setNotice('Signed out.'); setSession(null); })} />;
}

function SignedIn({ session, onSignOut }: { session: ConsoleSession; onSignOut: () => void }) {
  const { path, query } = useLocation();
  const [projects, setProjects] = useState<Project[] | null>(null);
  useEffect(() => {
    call<Project[]>('GET', '/api/projects').then(setProjects, () => setProjects([]));
  }, []);
  const match = PROJECT_PAGE.exec(path);
  const project = match ? decodeURIComponent(match[1]) : projects?.[0]?.name ?? null;
  useEffect(() => {
    if (!match && !(path === '/users' && session.user.admin) && project) navigate(`/projects/${encodeURIComponent(project)}/runs`, true);
  }, [path, project]);

  return (
    <>
      <header class="top">
        <span class="brand">orchestrator</span>
        {projects && projects.length > 1 && project && (
          <label class="project">Project <select value={project} onChange={(event) => navigate(`/projects/${encodeURIComponent((event.target as HTMLSelectElement).value)}/runs`)}>
            {projects.map((p) => <option value={p.name}>{p.name}</option>)}
          </select></label>
        )}
        <nav>
          {project && <Link to={`/projects/${encodeURIComponent(project)}/runs`} class={match?.[2] === 'runs' ? 'current' : ''}>Runs</Link>}
          {project && <Link to={`/projects/${encodeURIComponent(project)}/fleets`} class={match?.[2] === 'fleets' ? 'current' : ''}>Fleets</Link>}
          {project && MORE_PROJECT_PAGES.map(([page, label]) => <Link to={`/projects/${encodeURIComponent(project)}/${page}`} class={match?.[2] === page ? 'current' : ''}>{label}</Link>)}
          {session.user.admin && <Link to="/users" class={path === '/users' ? 'current' : ''}>Users</Link>}
        </nav>
        <span class="who">{session.user.name}{session.user.admin ? ' (admin)' : ''}</span>
        <button onClick={onSignOut}>Sign out</button>
      </header>
      <main>
        {path === '/users' && session.user.admin ? <UsersPage self={session.user.name} />
          : projects === null ? <p class="muted">Loading…</p>
            : !project ? (
              <div class="empty">
                <p>You are not a member of any project yet.</p>
                <p>Ask an admin to add you: <code>orchestrator member add {session.user.name} --project main</code></p>
              </div>
            ) : <ProjectPages project={project} page={match?.[2] ?? 'runs'} run={match?.[3] ? decodeURIComponent(match[3]) : null} query={query} session={session} />}
      </main>
    </>
  );
}

/** A project's pages share one live stream, so that going from the list to a run and back keeps it open. */
function ProjectPages({ project, page, run, query, session }: { project: string; page: string; run: string | null; query: URLSearchParams; session: ConsoleSession }) {
  const live = useLiveRuns(project);
  if (live.refused) return <p class="empty" role="alert">{live.refused}.</p>;
  if (page === 'fleets') return <FleetsPage project={project} live={live} />;
  if (page === 'models') return <ModelsPage project={project} />;
  if (page === 'offers') return <OffersPage project={project} query={query} />;
  if (page === 'events') return <EventsPage project={project} query={query} live={live} />;
  if (page === 'gateways') return <GatewaysPage project={project} live={live} />;
  if (page === 'apply') return <ApplyPage project={project} />;
  if (page === 'settings') return <SettingsPage project={project} session={session} />;
  if (page === 'costs') return <CostsPage project={project} session={session} query={query} />;
  if (run) return <RunPage project={project} name={run} live={live} />;
  return <RunsPage project={project} live={live} query={query} />;
}

render(<App />, document.getElementById('app')!);
