import { expect } from 'chai';
import type { Db } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { upsertProject } from '../store/projects.js';
import { forgetHostKeys, knownHostKey, recordHostKey } from '../store/ssh-host-keys.js';
import { normalizeResources } from '../api/resources.js';
import { DATABASE_KINDS, openScratchDb } from './helpers/databases.js';
import { migrate } from '../store/migrations.js';

for (const kind of DATABASE_KINDS) {
  describe(`SSH fleets' host keys on ${kind}`, () => {
    let db: Db;
    let close: (() => Promise<void>) | undefined;
    let fleetId: string;

    before(async () => {
      ({ db, close } = await openScratchDb(kind));
      await migrate(db);
      const project = await upsertProject(db, 'keys', []);
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
  });
}
