import { PlumbingErrors } from './errors';
import { isStalePreparedStatement } from './prepared';

/**
 * SQLSTATEs where the database, not the statement, is the problem: the same work succeeds once it
 * recovers. Classes 08 (connection), 53 (insufficient resources: disk full, out of memory, too
 * many connections) and 58 (system I/O), plus serialization failures, deadlocks, a completion
 * unknown (40003), a lock timeout, operator intervention (a cancel or a statement_timeout: 57014;
 * shutdowns), a session ended for idling in a transaction (25P03), and a server that turned read
 * only under us (25006: a switchover, the old primary now a standby). A consumer dead-letters what
 * is not transient after a few tries, so each of these left out would turn a moment of trouble on
 * the server into good events set aside, and a sweeper acting as if they had never come.
 */
const TRANSIENT_SQLSTATE = /^(08|53|58)...$|^(40001|40003|40P01|55P03|57014|57P01|57P02|57P03|57P05|25006|25P03)$/;
/** Node's network errors, by code: a database host that is restarting or briefly unresolvable (a compose service being recreated) is not a bad message. */
const TRANSIENT_NET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED']);

/**
 * True for errors where the same statement may succeed later. Consumers retry these without limit
 * instead of dead-lettering: an outage of the database must never cost a good event.
 */
export function isTransientDbError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (TRANSIENT_SQLSTATE.test(code) || TRANSIENT_NET_CODES.has(code) || code === PlumbingErrors.CONNECTION_STALLED)) return true;
  // A prepared statement another instance's migration outdated: its connection is closed on
  // release (usePreparedStatements), and the same work succeeds on the next one.
  if (isStalePreparedStatement(error)) return true;
  if (typeof message !== 'string') return false;
  // A pool that has ended: the process is closing, and the work it refused is not a bad message
  // (a consumer run still queued then must be left to the next owner, not dead-lettered).
  return /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Cannot use a pool after calling end on the pool/i.test(message);
}
