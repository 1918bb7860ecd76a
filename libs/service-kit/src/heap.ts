import { ServiceKitError, ServiceKitErrors } from './errors';
import { setFlagsFromString } from 'node:v8';

/**
 * After each full collection V8 lets the old generation grow to a multiple of what survived it
 * before collecting again. By default it picks that multiple itself, up to 4x, and a service
 * streaming work through promotes short-lived objects that only a full collection frees:
 * task-svc's resident memory climbed to 280-300 MB on a 1,000,000-line import with 40 MB live, and
 * stayed there. A fixed factor of 1 + percent/100 bounds that garbage to percent/100 of the live
 * heap, at the price of more full collections: a consumer catching up on a backlog spent about a
 * quarter more CPU per event with 100. 0 leaves V8's own choice.
 *
 * Process-wide, so it belongs to the process that starts the service (`startService`), not to a
 * service built inside a test runner.
 */
export function limitHeapGrowth(percent: number): void {
  if (!Number.isInteger(percent) || percent < 0) throw new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `heap growing percent must be a whole number ≥ 0, got ${percent}`);
  if (percent === 0) return;
  setFlagsFromString(`--heap-growing-percent=${percent}`);
}
