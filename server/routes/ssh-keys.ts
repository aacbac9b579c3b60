import Router from '@koa/router';
import { Value } from '@sinclair/typebox/value';
import { createHash } from 'node:crypto';
import ssh2 from 'ssh2';
import { SSH_PUBLIC_KEY_MAX_BYTES, SshKeyRequest } from '../../api/objects.js';
import { addSshKey, listSshKeys, MAX_SSH_KEYS_PER_USER } from '../../store/ssh-keys.js';
import { currentUser } from '../auth.js';
import type { ServerContext } from '../context.js';
import { HttpError, readJsonObject } from '../http-errors.js';

const invalidKey = (message: string) => new HttpError(422, 'invalid_ssh_key', message);

/** One line `type base64 [comment]`, the form of ~/.ssh/id_*.pub and authorized_keys. */
const PUBLIC_KEY_LINE = /^(\S+) ([A-Za-z0-9+/]+={0,2})(?: +([^\r\n]*))?$/;

/** The key as stored and sent to agents (its own line, comment kept), and its fingerprint as `ssh-keygen -l` prints it. */
export function checkedPublicKey(text: string): { publicKey: string; fingerprint: string } {
  const line = text.trim();
  const match = PUBLIC_KEY_LINE.exec(line);
  if (!match) throw invalidKey('publicKey: expected one line of OpenSSH public key form, such as the contents of ~/.ssh/id_ed25519.pub ("ssh-ed25519 AAAA... comment")');
  const parsed = ssh2.utils.parseKey(line);
  if (parsed instanceof Error) throw invalidKey(`publicKey: not a valid OpenSSH public key: ${parsed.message}`);
  if (parsed.isPrivateKey()) throw invalidKey('publicKey: this is a private key; send the public one (the .pub file)');
  const blob = Buffer.from(match[2]!, 'base64');
  const fingerprint = `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
  return { publicKey: [match[1], match[2], match[3]?.trim()].filter(Boolean).join(' '), fingerprint };
}

/** The caller's own public keys, which the agents of their projects' runs accept for `ssh`. */
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
      throw new HttpError(422, 'too_many_ssh_keys', `you have ${MAX_SSH_KEYS_PER_USER} keys, the most one user may have`);
    }
    const { key, created } = await addSshKey(db, user.id, publicKey, fingerprint);
    ctx.status = created ? 201 : 200;
    ctx.body = key;
  });
  return router;
}
