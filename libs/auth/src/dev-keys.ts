import { AuthError, AuthErrors } from './errors';
import { link, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { JSONWebKeySet, JWK } from 'jose';
import { generateSigningKey, publicJwksOf } from './issuer';

/** Where `npm start`, `npm run token` and the tools keep the local signing key (gitignored). */
export const DEV_KEY_FILE = '.local/auth/dev-signing-key.json';
/** The signing key file for this process: `LABELFLOW_SIGNING_KEY_FILE`, else the default. */
export const devKeyFile = (env: Readonly<Record<string, string | undefined>> = process.env): string => env.LABELFLOW_SIGNING_KEY_FILE || DEV_KEY_FILE;

/** Issuer and audience of the local development identity. */
export const DEV_ISSUER = 'labelflow-dev';
export const DEV_AUDIENCE = 'labelflow';

export interface DevKey {
  readonly privateJwk: JWK;
  readonly publicJwks: JSONWebKeySet;
}

/**
 * Reads the local signing key, creating it (mode 0600) on first use. Concurrent first uses each
 * write a complete file and hard-link it into place: a link fails if the name exists, so exactly
 * one wins and all of them then read that one.
 */
export async function loadOrCreateDevKey(file = devKeyFile()): Promise<DevKey> {
  const existing = await readKey(file);
  if (existing) return existing;
  const { privateJwk } = await generateSigningKey();
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const temp = `${file}.${process.pid}.${Date.now()}.tmp`;
  await writeFile(temp, `${JSON.stringify(privateJwk)}\n`, { mode: 0o600, flag: 'wx' });
  try {
    await link(temp, file).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
  } finally {
    await rm(temp, { force: true });
  }
  const created = await readKey(file);
  if (!created) throw new AuthError(AuthErrors.CONFIG_INVALID, `could not create the development signing key at ${file}`);
  return created;
}

async function readKey(file: string): Promise<DevKey | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  const privateJwk = JSON.parse(text) as JWK;
  if (typeof privateJwk.d !== 'string') throw new AuthError(AuthErrors.CONFIG_INVALID, `${file} is not a private JWK`);
  return { privateJwk, publicJwks: publicJwksOf(privateJwk) };
}
