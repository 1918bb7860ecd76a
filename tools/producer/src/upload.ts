// The bulk import endpoint's client: a streamed request body (never the whole file in memory, and
// the generator only runs as fast as the socket drains), the summary validated at the boundary, and
// the check of that summary against what the file is known to hold.
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { importLines, LineKind, type ImportFileOptions, type ImportFilePlan } from './ndjson';

const Count = z.number().int().min(0);

/** What `POST /projects/:projectId/tasks/import` and `GET /projects/:projectId/imports/:importId` answer. */
export const ImportSummary = z.looseObject({
  importId: z.uuid(),
  status: z.string().min(1),
  lines: Count,
  created: Count,
  alreadyPresent: Count,
  rejected: Count,
  errors: z.array(z.looseObject({ line: z.number().int().min(1), code: z.string().min(1), message: z.string() })),
});
export type ImportSummary = z.infer<typeof ImportSummary>;

export interface UploadOptions {
  readonly baseUrl: string;
  readonly projectId: string;
  readonly importId: string;
  readonly authorization: () => Promise<string> | string;
  /** The request body, produced lazily: pulled only as fast as the connection takes it. */
  readonly body: () => AsyncIterable<Buffer>;
  /** Gives up on an upload that has neither sent nor received anything for this long. Default 120 s. */
  readonly idleTimeoutMs?: number;
}

export type UploadResult =
  | { readonly ok: true; readonly summary: ImportSummary }
  /** `retryAfterMs`: the answer's `Retry-After` (whole seconds), when it had a valid one. */
  | { readonly ok: false; readonly status: number; readonly body: unknown; readonly retryAfterMs?: number };

/** `Retry-After` in whole seconds, as milliseconds; undefined when absent or not a number. */
const retryAfterOf = (response: IncomingMessage): number | undefined => {
  const raw = response.headers['retry-after'];
  return raw !== undefined && /^\d{1,5}$/.test(raw) ? Number(raw) * 1000 : undefined;
};

const readBody = async (response: IncomingMessage): Promise<string> => {
  const parts: Buffer[] = [];
  for await (const chunk of response) parts.push(chunk as Buffer);
  return Buffer.concat(parts).toString('utf8');
};

/**
 * Uploads one file. Resolves with the validated summary on 200, with the status and body on any
 * other answer; rejects when the connection fails (the caller may upload the same file again under
 * the same import id: the endpoint resumes it).
 */
export async function uploadImport(o: UploadOptions): Promise<UploadResult> {
  const url = new URL(`${o.baseUrl}/projects/${encodeURIComponent(o.projectId)}/tasks/import`);
  url.searchParams.set('importId', o.importId);
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  const req = send(url, {
    method: 'POST',
    headers: { 'content-type': 'application/x-ndjson', authorization: await o.authorization(), 'transfer-encoding': 'chunked' },
  });
  req.setTimeout(o.idleTimeoutMs ?? 120_000, () => req.destroy(new Error(`the import upload was idle for ${(o.idleTimeoutMs ?? 120_000) / 1000} s`)));
  const answered = new Promise<IncomingMessage>((resolve, reject) => {
    req.once('response', resolve);
    req.once('error', reject);
  });
  let finished = false;
  // Errors of the body reach `answered` through the request; this only notes the end.
  const sent = pipeline(Readable.from(o.body()), req).then(
    () => (finished = true),
    () => undefined,
  );
  const response = await answered;
  const text = await readBody(response);
  // The server may answer before it has read everything (a refusal): the rest is not sent.
  if (!finished) req.destroy();
  await sent;
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: kept as text for the report
  }
  if (response.statusCode !== 200) {
    const retryAfterMs = retryAfterOf(response);
    return { ok: false, status: response.statusCode ?? 0, body, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) };
  }
  const summary = ImportSummary.safeParse(body);
  if (!summary.success) return { ok: false, status: 200, body: { error: 'the summary does not have the documented shape', issues: summary.error.issues.slice(0, 5), body } };
  return { ok: true, summary: summary.data };
}

/** Where the check starts from: a first upload creates every distinct valid line; a re-upload none. */
export const UploadKind = { first: 'first', again: 'again' } as const;
export type UploadKind = (typeof UploadKind)[keyof typeof UploadKind];

/**
 * The summary against the file: every line counted once (created + already present + rejected =
 * lines), created = the distinct valid lines on a first upload (0 on a re-upload), already present =
 * the repeats (plus, on a re-upload, the distinct lines), rejected = the bad lines, and every
 * reported error on a bad line. Returns the problems, none when the summary is right.
 */
export function checkImportSummary(file: ImportFileOptions, plan: ImportFilePlan, summary: ImportSummary, kind: UploadKind): string[] {
  const problems: string[] = [];
  const expect = (what: string, got: number, want: number) => {
    if (got !== want) problems.push(`${what}: ${got}, expected ${want}`);
  };
  expect('lines', summary.lines, plan.lines);
  expect('created', summary.created, kind === UploadKind.first ? plan.distinct : 0);
  expect('alreadyPresent', summary.alreadyPresent, kind === UploadKind.first ? plan.repeats : plan.distinct + plan.repeats);
  expect('rejected', summary.rejected, plan.bad);
  expect('created + alreadyPresent + rejected', summary.created + summary.alreadyPresent + summary.rejected, summary.lines);
  if (summary.status !== 'completed') problems.push(`status: ${summary.status}, expected completed`);
  if (summary.errors.length > plan.bad) problems.push(`${summary.errors.length} errors reported for ${plan.bad} bad lines`);
  // Both in line order: one pass over the file, whatever its size.
  const reported = [...summary.errors].sort((a, b) => a.line - b.line);
  let next = 0;
  for (const line of importLines(file)) {
    const error = reported[next];
    if (!error) break;
    if (error.line < line.line) {
      problems.push(`error reported for line ${error.line} twice or out of the file`);
      next++;
      continue;
    }
    if (error.line !== line.line) continue;
    if (line.kind !== LineKind.bad) problems.push(`line ${line.line} (${line.kind}) was reported as ${error.code}: ${error.message}`);
    next++;
  }
  if (next < reported.length) problems.push(`${reported.length - next} errors name lines past the end of the file (first: line ${reported[next]?.line})`);
  return problems;
}
