import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { optionTexts } from '../cli/args.js';
import { selectProject, withDefault, withProject, type ClientConfig } from '../cli/config.js';
import { CliError } from '../cli/errors.js';
import { StatusDisplay } from '../cli/progress.js';
import { renderFleetPlan } from '../cli/plan.js';
import { renderTable } from '../cli/table.js';
import type { FleetPlan } from '../api/objects.js';
import type { FleetSpec } from '../api/spec.js';
import { collectFiles } from '../cli/upload.js';

/** A stream that says it is a terminal of the given width and keeps what is written. */
function terminal(columns: number): NodeJS.WriteStream & { text: () => string } {
  let written = '';
  const stream = new Writable({ write(chunk, _encoding, callback) { written += String(chunk); callback(); } }) as unknown as NodeJS.WriteStream & { text: () => string };
  Object.assign(stream, { isTTY: true, columns, text: () => written });
  return stream;
}

describe('CLI parts', () => {
  describe('renderTable', () => {
    it('pads columns and keeps every line within the width, cutting the widest column with …', () => {
      const rows = [['hello', 'done', 'exited with code 0'], ['second', 'submitted (#1)', 'waiting: fleet local is at its maximum of 1 node (1 busy)']];
      const wide = renderTable(['name', 'status', 'message'], rows, 200);
      expect(wide.split('\n')[0]).to.equal('NAME    STATUS          MESSAGE');
      expect(wide).to.contain('second  submitted (#1)  waiting: fleet local is at its maximum of 1 node (1 busy)');
      const narrow = renderTable(['name', 'status', 'message'], rows, 40);
      for (const line of narrow.trimEnd().split('\n')) expect(line.length).to.be.at.most(40);
      expect(narrow).to.contain('second  submitted (#1)  waiting: fleet …\n');
    });
  });

  describe('StatusDisplay', () => {
    it('prints one line per change where stderr is not a terminal', () => {
      let written = '';
      const pipe = new Writable({ write(chunk, _encoding, callback) { written += String(chunk); callback(); } }) as unknown as NodeJS.WriteStream;
      const display = new StatusDisplay(pipe);
      display.update('submitted', 'waiting to be scheduled');
      display.update('submitted', 'waiting to be scheduled');
      display.update('running', 'running on local-0');
      display.stop();
      expect(written).to.equal('submitted: waiting to be scheduled\nrunning: running on local-0\n');
    });

    it('spins on a terminal, writes each status when it changes, and clears its line around other output', () => {
      const stream = terminal(30);
      const display = new StatusDisplay(stream);
      display.update('submitted', 'waiting to be scheduled');
      display.update('running', 'running on a very long instance name');
      display.around(() => stream.write('a log line\n'));
      display.stop();
      const lines = stream.text().split('\n');
      expect(lines[0]).to.equal('\r\x1b[Ksubmitted: waiting to be scheduled');
      expect(lines[1]).to.match(/^\r\x1b\[K. submitted for 0s\r\x1b\[Krunning: running on a very long instance name$/);
      expect(lines[2]).to.match(/^\r\x1b\[K. running for 0s\r\x1b\[Ka log line$/);
      expect(lines.at(-1)).to.match(/^\r\x1b\[K. running for 0s\r\x1b\[K$/);
    });
  });

  describe('client settings', () => {
    const one = (name: string) => ({ name, url: 'http://127.0.0.1:3000', token: `${name}-token` });

    it('makes the first project the default, and another only when asked', () => {
      let config: ClientConfig = withProject({ projects: [] }, one('a'), false);
      config = withProject(config, one('b'), false);
      expect(selectProject(config, undefined).name).to.equal('a');
      config = withProject(config, one('c'), true);
      expect(selectProject(config, undefined).name).to.equal('c');
      expect(config.projects.filter((p) => p.default)).to.have.length(1);
      expect(selectProject(withDefault(config, 'b'), undefined).name).to.equal('b');
      expect(selectProject(config, 'a').token).to.equal('a-token');
      expect(() => selectProject(config, 'zz')).to.throw(CliError, 'project zz is not configured (configured: a, b, c)');
    });
  });

  describe('option text', () => {
    it('keeps values exactly as typed, including number-like ones', () => {
      expect(optionTexts(['token'], ['project', 'add', '--token', '0012', '--name=main'])).to.deep.equal(['0012']);
      expect(optionTexts(['f', 'file'], ['apply', '-f', 'a.yml', '--file=b.yml', '-y'])).to.deep.equal(['a.yml', 'b.yml']);
      expect(optionTexts(['f'], ['apply', '--', '-f', 'x'])).to.deep.equal([]);
    });
  });

  describe('collectFiles', () => {
    let dir: string;
    before(() => {
      dir = mkdtempSync(join(tmpdir(), 'orch-cli-files-'));
      mkdirSync(join(dir, 'data', 'nested'), { recursive: true });
      writeFileSync(join(dir, 'data', 'a.txt'), 'alpha');
      writeFileSync(join(dir, 'data', 'nested', 'run.sh'), '#!/bin/sh\necho hi\n');
      chmodSync(join(dir, 'data', 'nested', 'run.sh'), 0o755);
      writeFileSync(join(dir, 'single.txt'), 'one');
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    it('reads folders whole with their modes, under their own path or the one given', () => {
      const files = collectFiles(['data', 'single.txt:/etc/app/single.txt'], dir);
      expect(files.map((f) => f.path)).to.deep.equal(['data/a.txt', 'data/nested/run.sh', '/etc/app/single.txt']);
      expect(Buffer.from(files[0]!.contentBase64, 'base64').toString()).to.equal('alpha');
      expect(files[1]!.mode).to.equal(0o755);
    });

    it('asks where a file outside the configuration\'s folder goes, and names a missing one', () => {
      expect(() => collectFiles(['../secret'], dir)).to.throw(CliError, 'files: "../secret" is not inside the configuration\'s folder; say where it goes in the container, e.g. "../secret:/workflow/secret"');
      expect(() => collectFiles(['missing.txt'], dir)).to.throw(CliError, /files: "missing\.txt": .*missing\.txt does not exist/);
    });
  });

  describe('renderFleetPlan', () => {
    it('shows nodes with its target, and a change of it', () => {
      const plan: FleetPlan = { action: 'update', name: 'pool', requirement: 'any machine', currentGeneration: 1, offers: [], offersTotal: 0, offerErrors: [], problem: null };
      const spec: FleetSpec = { type: 'fleet', name: 'pool', backends: ['gpucloud'], nodes: { min: 1, target: 3, max: 4 } };
      const text = renderFleetPlan(spec, plan, { type: 'fleet', name: 'pool', backends: ['gpucloud'], nodes: '1..4' });
      expect(text).to.match(/^ {2}nodes\s+1\.\.4, target 3$/m);
      expect(text).to.match(/^ {2}changes\s+nodes: 1\.\.4 → 1\.\.4, target 3$/m);
    });
  });
});
