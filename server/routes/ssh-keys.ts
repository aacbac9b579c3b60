import Router from '@koa/router';
import { Value } from '@sinclair/typebox/value';
import ssh2 from 'ssh2';
import { SSH_PUBLIC_KEY_MAX_BYTES, SshKeyRequest } from '../../api/objects.js';
import { PUBLIC_KEY_LINE, sshFingerprint } from '../../api/ssh-keys.js';
import { addSshKey, deleteSshKey, listSshKeys, MAX_SSH_KEYS_PER_USER } from '../../store/ssh-keys.js';
import { currentUser } from '../auth.js';
import type { ServerContext } from '../context.js';
import { HttpError, notFound, readJsonObject } from '../http-errors.js';

const invalidKey = (message: string) => new HttpError(422, 'invalid_ssh_key', message);

/** The key as stored and sent to agents (its own line, comment kept), and its fingerprint as `ssh-keygen -l` prints it. */
function checkedPublicKey(text: string): { publicKey: string; fingerprint: string } {
  const line = text.trim();
  const match = PUBLIC_KEY_LINE.exec(line);
  if (!match) throw invalidKey('publicKey: expected one line of OpenSSH public key form, such as the contents of ~/.ssh/id_ed25519.pub ("ssh-ed25519 AAAA... comment")');
  const parsed = ssh2.utils.parseKey(line);
  if (parsed instanceof Error) throw invalidKey(`publicKey: not a valid OpenSSH public key: ${parsed.message}`);
  if (parsed.isPrivateKey()) throw invalidKey('publicKey: this is a private key; send the public one (the .pub file)');
  return { publicKey: [match[1], match[2], match[3]?.trim()].filter(Boolean).join(' '), fingerprint: sshFingerprint(line)! };
}

/** The caller's own public keys, which the agents of their projects' runs accept for `ssh`: list, add, delete. */
export function sshKeyRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/users/me/ssh-keys' });

  router.get('/', async (ctx) => {
    ctx.body = await listSshKeys(db, currentUser(ctx).id);
  });

  router.put('/', async (ctx) => {
    const body = await readJsonObject(ctx);
    if (!Value.Check(SshKeyRequest, body)) {
      const problem = Value.Errors(SshKeyRequest, body).First();
      const tooLong = typeof body.publicKey === 'string' && body.publicKey.length > SSH_PUBLIC_KEY_MAX_BYTES;
      throw invalidKey(tooLong ? `publicKey: longer than ${SSH_PUBLIC_KEY_MAX_BYTES} bytes` : `${problem?.path.slice(1) || 'body'}: ${problem?.message}; expected {"publicKey": "ssh-ed25519 AAAA..."}`);
    }
    const { publicKey, fingerprint } = checkedPublicKey(body.publicKey);
    const user = currentUser(ctx);
    const keys = await listSshKeys(db, user.id);
    if (!keys.some((k) => k.fingerprint === fingerprint) && keys.length >= MAX_SSH_KEYS_PER_USER) {
      throw new HttpError(422, 'too_many_ssh_keys', `you have ${MAX_SSH_KEYS_PER_USER} keys, the most one user may have; delete one you no longer use (orchestrator ssh-key list, then ssh-key delete FINGERPRINT)`);
    }
    const { key, created } = await addSshKey(db, user.id, publicKey, fingerprint);
    ctx.status = created ? 201 : 200;
    ctx.body = key;
  });

  // Agents ask for the caller's keys at each connection, so a deleted key opens no new session from then on.
  router.delete('/:fingerprint', async (ctx) => {
    const fingerprint = ctx.params.fingerprint!;
    if (!await deleteSshKey(db, currentUser(ctx).id, fingerprint)) throw notFound(`you have no SSH key ${fingerprint}`);
    ctx.status = 204;
  });
  return router;
}
