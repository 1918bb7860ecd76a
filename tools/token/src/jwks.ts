// Prints the local development key's public JWKS as one JSON line (creating the key on first use):
// what `npm start` and `npm run compose:env` configure the services with (AUTH_PUBLIC_KEYS).
import { devKeyFile, loadOrCreateDevKey } from '@labelflow/auth';

const { publicJwks } = await loadOrCreateDevKey(devKeyFile());
process.stdout.write(`${JSON.stringify(publicJwks)}\n`);
