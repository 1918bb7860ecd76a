import { randomBytes } from 'node:crypto';

/** A name no other test (or earlier run) uses: topics, groups and databases are never shared. */
export const uniqueName = (prefix: string): string => `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`.toLowerCase();
