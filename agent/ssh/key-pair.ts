import ssh2 from 'ssh2';

/**
 * A new ed25519 key pair in OpenSSH form. ssh2 drops the leading zero byte of a public key that starts with one
 * (about one key in 256) and writes a private key that nothing, ssh2 included, can read; such a pair is drawn again.
 */
export function generateEd25519KeyPair(comment?: string): { private: string; public: string } {
  for (;;) {
    const pair = ssh2.utils.generateKeyPairSync('ed25519', comment === undefined ? undefined : { comment });
    if (!(ssh2.utils.parseKey(pair.private) instanceof Error)) return pair;
  }
}
