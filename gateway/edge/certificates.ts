import { X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { createSecureContext, type SecureContext } from 'node:tls';
import * as acme from 'acme-client';
import type { Logger } from 'winston';
import type { GatewayConfig } from '../../api/gateway-process.js';
import type { ServerApi } from './server-api.js';

/** A certificate is renewed once less than this share of its lifetime is left (30 of Let's Encrypt's 90 days). */
export const RENEW_WHEN_LEFT = 1 / 3;
/** After a failed issuance, the next try waits this long, doubling up to `MAX_RETRY_MS`, so that a broken set-up does not hit the CA's limits. */
const FIRST_RETRY_MS = 60_000;
const MAX_RETRY_MS = 3_600_000;
/** ACME polls its order with this backoff; acme-client's own default starts at 5 s. */
const ACME_POLL = { backoffAttempts: 12, backoffMin: 250, backoffMax: 5000 };

interface Installed {
  pem: string;
  context: SecureContext;
  notBefore: number;
  notAfter: number;
}

function installable(certificatePem: string, keyPem: string): Installed {
  const leaf = new X509Certificate(certificatePem);
  return {
    pem: certificatePem,
    context: createSecureContext({ cert: certificatePem, key: keyPem }),
    notBefore: Date.parse(leaf.validFrom),
    notAfter: Date.parse(leaf.validTo),
  };
}

/**
 * The gateway's TLS certificates, by hostname, for the HTTPS server's SNI: those its server stored, those it gets
 * from the ACME server (HTTP-01, answered from `challenges` on the HTTP port) when one is missing or due for
 * renewal, or one certificate from files (type manual). Replacing a certificate swaps the context that new
 * handshakes get; connections already open keep theirs.
 */
export class Certificates {
  private installed = new Map<string, Installed>();
  private manual: { context: SecureContext; stamp: string } | null = null;
  /** HTTP-01 tokens and their key authorizations, while an order waits for its validation. */
  readonly challenges = new Map<string, string>();
  private readonly retries = new Map<string, { at: number; delayMs: number }>();
  /** Certificates issued while the server did not answer, to store once it does. */
  private readonly unsaved = new Map<string, { certificatePem: string; keyPem: string }>();
  private accountKey: string | null = null;
  private client: { key: string; directory: string; client: acme.Client } | null = null;
  private issuing: Promise<void> | null = null;

  constructor(private readonly api: ServerApi, private readonly logger: Logger) {}

  contextFor(servername: string): SecureContext | undefined {
    return this.installed.get(servername.toLowerCase())?.context ?? this.manual?.context;
  }

  has(hostname: string): boolean {
    return this.contextFor(hostname) !== undefined;
  }

  /** Brings the certificates in line with a new copy of the configuration; issues what is missing or due, one at a time. */
  update(config: GatewayConfig): void {
    const { certificate } = config.gateway;
    if (certificate.type === 'manual') {
      this.loadManual(certificate.certFile!, certificate.keyFile!);
      return;
    }
    this.manual = null;
    const wanted = new Set(config.hostnames);
    for (const hostname of this.installed.keys()) if (!wanted.has(hostname)) this.installed.delete(hostname);
    for (const stored of config.certificates) {
      const current = this.installed.get(stored.hostname);
      if (!wanted.has(stored.hostname) || current?.pem === stored.certificatePem) continue;
      try {
        const candidate = installable(stored.certificatePem, stored.keyPem);
        if (!current || candidate.notAfter > current.notAfter) this.installed.set(stored.hostname, candidate);
      } catch (error) {
        this.logger.warn(`gateway: the stored certificate of ${stored.hostname} cannot be used: ${(error as Error).message}`);
      }
    }
    this.accountKey ??= config.acmeAccountKeyPem;
    if (this.unsaved.size > 0) void this.saveUnsaved();
    if (!this.issuing && config.hostnames.some((hostname) => this.due(hostname))) {
      this.issuing = this.issueDue(config).finally(() => { this.issuing = null; });
    }
  }

  /** Resolves once the issuances under way have ended. */
  async settle(): Promise<void> {
    await this.issuing;
  }

  private due(hostname: string): boolean {
    const now = Date.now();
    if ((this.retries.get(hostname)?.at ?? 0) > now) return false;
    const current = this.installed.get(hostname);
    return !current || now > current.notAfter - (current.notAfter - current.notBefore) * RENEW_WHEN_LEFT;
  }

  private async issueDue(config: GatewayConfig): Promise<void> {
    for (const hostname of config.hostnames) {
      if (this.due(hostname)) await this.issue(config, hostname);
    }
  }

  private async issue(config: GatewayConfig, hostname: string): Promise<void> {
    const { acmeServer, email } = config.gateway.certificate;
    try {
      const client = await this.acmeClient(acmeServer);
      const key = (await acme.crypto.createPrivateEcdsaKey()).toString();
      const [, csr] = await acme.crypto.createCsr({ commonName: hostname }, key);
      const certificatePem = await client.auto({
        csr, email: email ?? undefined, termsOfServiceAgreed: true, challengePriority: ['http-01'],
        // The CA checks the challenge through the domain's DNS; a check from here could only reach this process.
        skipChallengeVerification: true,
        challengeCreateFn: async (_authz, challenge, keyAuthorization) => { this.challenges.set(challenge.token, keyAuthorization); },
        challengeRemoveFn: async (_authz, challenge) => { this.challenges.delete(challenge.token); },
      });
      this.installed.set(hostname, installable(certificatePem, key));
      this.retries.delete(hostname);
      this.logger.info(`gateway: certificate for ${hostname} issued by ${acmeServer}`);
      this.unsaved.set(hostname, { certificatePem, keyPem: key });
      await this.saveUnsaved();
    } catch (error) {
      const delayMs = Math.min(MAX_RETRY_MS, (this.retries.get(hostname)?.delayMs ?? FIRST_RETRY_MS / 2) * 2);
      this.retries.set(hostname, { at: Date.now() + delayMs, delayMs });
      const reason = `${(error as Error).message} (from ${acmeServer}; next try in ${Math.round(delayMs / 1000)} s)`;
      this.logger.warn(`gateway: no certificate for ${hostname}: ${reason}`);
      await this.api.reportFailure(hostname, reason).catch(() => {});
    }
  }

  private async acmeClient(directory: string): Promise<acme.Client> {
    if (!this.accountKey) {
      const key = (await acme.crypto.createPrivateEcdsaKey()).toString();
      // Kept only once stored, so that a restarted gateway signs in to the same ACME account.
      await this.api.saveAccountKey(key);
      this.accountKey = key;
    }
    if (this.client?.key !== this.accountKey || this.client.directory !== directory) {
      this.client = { key: this.accountKey, directory, client: new acme.Client({ directoryUrl: directory, accountKey: this.accountKey, ...ACME_POLL }) };
    }
    return this.client.client;
  }

  private async saveUnsaved(): Promise<void> {
    for (const [hostname, { certificatePem, keyPem }] of this.unsaved) {
      try {
        await this.api.saveCertificate(hostname, certificatePem, keyPem);
        this.unsaved.delete(hostname);
      } catch (error) {
        this.logger.warn(`gateway: storing the certificate of ${hostname} failed, trying again later: ${(error as Error).message}`);
        return;
      }
    }
  }

  /** Reads the files again when either changed (a renewed certificate dropped in place). */
  private loadManual(certFile: string, keyFile: string): void {
    try {
      const stamp = [certFile, keyFile].map((file) => statSync(file).mtimeMs).join(' ');
      if (this.manual?.stamp === stamp) return;
      this.manual = { context: createSecureContext({ cert: readFileSync(certFile), key: readFileSync(keyFile) }), stamp };
      this.logger.info(`gateway: certificate loaded from ${certFile}`);
    } catch (error) {
      this.logger.warn(`gateway: cannot load the certificate from ${certFile} and ${keyFile}: ${(error as Error).message}`);
    }
  }
}
