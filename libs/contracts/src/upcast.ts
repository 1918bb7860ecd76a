import { z } from 'zod';
import type { LabelSubmitted, LabelSubmittedV1 } from './label-events';
import type { EventType } from './topics';

/**
 * The newest version of each event type this code reads and writes. A reader meets older versions
 * through the upcasters below and refuses newer ones (`versionedTopic`): it cannot know what a
 * newer version means, so it must neither guess nor drop it.
 */
export const LatestVersions = {
  TaskCreated: 1,
  TaskAssigned: 1,
  TaskReopened: 1,
  TaskCompleted: 1,
  TaskFailed: 1,
  TaskCancelled: 1,
  LabelSubmitted: 2,
  QaStarted: 1,
  QaPassed: 1,
  QaRejected: 1,
  QaTimedOut: 1,
  BillingCompleted: 1,
  BillingFailed: 1,
  BillingRefunded: 1,
} as const satisfies Record<EventType, number>;

// Upcasters lift one version to the next. Each says what the new fields default to for events
// written before they existed; chaining them takes any known version to the newest.

/** v1 → v2: nobody measured the work, so `durationMs` is null (unknown), never 0. */
export const labelSubmittedV1ToV2 = (event: LabelSubmittedV1): LabelSubmitted =>
  // Frozen like every parsed event (defineEvent's read-only schemas): an upcast one is no exception.
  Object.freeze({ ...event, version: 2, payload: Object.freeze({ ...event.payload, durationMs: null }) });

/**
 * The newest LabelSubmitted written as version 1, for an instance that must still write what
 * not-yet-upgraded readers understand (a gray release). Only `durationMs` is lost; readers of v2
 * see it as null, exactly as `labelSubmittedV1ToV2` says. `heldBy` stays: it is optional in v1
 * too, so an upgraded qa-svc still bars the holder from reviewing a model's labels.
 */
export function labelSubmittedAsV1<E extends { readonly version: 2; readonly payload: LabelSubmitted['payload'] }>(
  event: E,
): Omit<E, 'version' | 'payload'> & { readonly version: 1; readonly payload: LabelSubmittedV1['payload'] } {
  const { durationMs: _unknownToV1, ...payload } = event.payload;
  return { ...event, version: 1, payload };
}

/** The key of a "version too new" issue's params: how a decoder tells it from any other schema failure. */
export const VERSION_UNSUPPORTED = 'VERSION_UNSUPPORTED';

/** An event of a known type in a version newer than the newest this code knows. */
export interface UnsupportedVersion {
  readonly type: string;
  readonly version: number;
  readonly latest: number;
}

/**
 * A topic's wire schema: an event of one of `latest`'s types in a newer version than listed fails
 * with a single issue that `unsupportedVersion` recognises (its path is `version`); anything else
 * goes to `union`, which validates each (type, version) against its own schema and lifts older
 * versions to the newest. So the output is always the newest shape and the input is any known one.
 */
export function versionedTopic<U extends z.ZodType>(union: U, latest: Readonly<Record<string, number>>) {
  return z
    .unknown()
    .superRefine((value, ctx) => {
      if (typeof value !== 'object' || value === null) return;
      const { type, version } = value as { readonly type?: unknown; readonly version?: unknown };
      if (typeof type !== 'string' || !Object.hasOwn(latest, type) || typeof version !== 'number' || !Number.isInteger(version)) return;
      const newest = latest[type] as number;
      if (version <= newest) return;
      const params: Record<typeof VERSION_UNSUPPORTED, UnsupportedVersion> = { [VERSION_UNSUPPORTED]: { type, version, latest: newest } };
      ctx.addIssue({ code: 'custom', path: ['version'], message: `${type} version ${version} is newer than this code knows (up to version ${newest})`, params });
    })
    .pipe(union);
}

/** Why a parse failed, if it failed because the event is newer than this code: the type, its version and the newest known. */
export function unsupportedVersion(issues: readonly z.core.$ZodIssue[]): UnsupportedVersion | undefined {
  for (const issue of issues) {
    if (issue.code !== 'custom') continue;
    const found = (issue.params as Partial<Record<typeof VERSION_UNSUPPORTED, UnsupportedVersion>> | undefined)?.[VERSION_UNSUPPORTED];
    if (found) return found;
  }
  return undefined;
}
