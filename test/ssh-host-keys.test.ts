import { expect } from 'chai';
import type { Db } from '../store/db.js';
import { applyFleet, type FleetDesired } from '../store/fleets.js';
import { upsertProject, type ProjectRecord } from '../store/projects.js';
import { forgetHostKeys, knownHostKey, recordHostKey } from '../store/ssh-host-keys.js';
import { normalizeResources } from '../api/resources.js';
import { DATABASE_KINDS, openScratchDb } from './helpers/databases.js';
import { migrate } from '../store/migrations.js';
import { writeFleet } from '../server/apply.js';

for (const kind of DATABASE_KINDS) {
  describe(`SSH fleets' host keys on ${kind}`, () => {
    let db: Db;
    let close: (() => Promise<void>) | undefined;
    let fleetId: string;
    let project: ProjectRecord;

    before(async () => {
      ({ db, close } = await openScratchDb(kind));
      await migrate(db);
      project = await upsertProject(db, 'keys', []);
      ({ fleet: { id: fleetId } } = await applyFleet(db, project.id, {
        name: 'own', spec: { ssh_config: { hosts: ['10.0.0.5'] } }, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 1, nodesMax: 1, idleSeconds: null, backends: ['ssh'],
      }));
    });
    after(() => close?.());

    it('keeps the first key a host showed: a later one does not replace it, and forgetting the host makes the next contact a first one', async () => {
      expect(await knownHostKey(db, fleetId, '10.0.0.5:22')).to.equal(null);
      expect(await recordHostKey(db, fleetId, '10.0.0.5:22', 'ssh-ed25519 AAAAfirst')).to.equal('ssh-ed25519 AAAAfirst');
      expect(await recordHostKey(db, fleetId, '10.0.0.5:22', 'ssh-ed25519 AAAAsecond'), 'a concurrent first contact keeps the first').to.equal('ssh-ed25519 AAAAfirst');
      await recordHostKey(db, fleetId, '10.0.0.6:22', 'ssh-ed25519 AAAAother');
      await forgetHostKeys(db, fleetId, ['10.0.0.5:22']);
      expect(await knownHostKey(db, fleetId, '10.0.0.5:22')).to.equal('ssh-ed25519 AAAAfirst');
      expect(await knownHostKey(db, fleetId, '10.0.0.6:22')).to.equal(null);
      await forgetHostKeys(db, fleetId, []);
      expect(await knownHostKey(db, fleetId, '10.0.0.5:22')).to.equal(null);
    });

    it('forgets a removed host\'s key within the apply that removes it, so that adding it back right after is a first contact', async () => {
      const fleet = (hosts: string[]): FleetDesired => ({
        name: 'applied', spec: { ssh_config: { hosts, proxy_jump: { hostname: '10.0.0.1' } } }, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 0, nodesMax: null, idleSeconds: null, backends: ['ssh'],
      });
      const { fleet: { id } } = await writeFleet(db, project, fleet(['10.0.0.7', '10.0.0.8']));
      for (const address of ['10.0.0.1:22', '10.0.0.7:22', '10.0.0.8:22']) await recordHostKey(db, id, address, `ssh-ed25519 AAAA${address}`);
      await writeFleet(db, project, fleet(['10.0.0.7', '10.0.0.8']));
      expect(await knownHostKey(db, id, '10.0.0.8:22'), 'an apply that changes nothing keeps every key').to.equal('ssh-ed25519 AAAA10.0.0.8:22');
      await writeFleet(db, project, fleet(['10.0.0.7']));
      expect(await knownHostKey(db, id, '10.0.0.8:22'), 'the removed host').to.equal(null);
      expect(await knownHostKey(db, id, '10.0.0.7:22'), 'the host kept').to.equal('ssh-ed25519 AAAA10.0.0.7:22');
      expect(await knownHostKey(db, id, '10.0.0.1:22'), 'the head node kept').to.equal('ssh-ed25519 AAAA10.0.0.1:22');
    });
  });
}
