import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { importFileChunks, importLines, LineKind, planImportFile, type ImportFileOptions } from './ndjson';
import { checkImportSummary, uploadImport, UploadKind, type ImportSummary } from './upload';

const file: ImportFileOptions = { lines: 5_000, repeat: 0.2, bad: 0.01, seed: 3, tag: 't' };
const plan = planImportFile(file);
const importId = '6f1c2b9e-8d7a-4e3f-b2a1-0c9d8e7f6a5b';

/** What a correct endpoint answers for `file`: every bad line reported. */
const rightSummary = (): ImportSummary => ({
  importId,
  status: 'completed',
  lines: plan.lines,
  created: plan.distinct,
  alreadyPresent: plan.repeats,
  rejected: plan.bad,
  errors: [...importLines(file)].filter((l) => l.kind === LineKind.bad).map((l) => ({ line: l.line, code: 'LINE_INVALID', message: 'bad' })),
});

describe('the import upload', () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

  it('streams the file as chunked NDJSON with the bearer token and returns the validated summary', async () => {
    let seen: { headers: IncomingHttpHeaders; url: string; bytes: number; lines: number } | undefined;
    server = createServer((req, res) => {
      let bytes = 0;
      let lines = 0;
      req.on('data', (c: Buffer) => {
        bytes += c.length;
        for (const b of c) if (b === 0x0a) lines++;
      });
      req.on('end', () => {
        seen = { headers: req.headers, url: req.url ?? '', bytes, lines };
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(rightSummary()));
      });
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const result = await uploadImport({ baseUrl, projectId: 'p-1', importId, authorization: () => 'Bearer x.y.z', body: () => importFileChunks(file) });
    expect(result.ok).toBe(true);
    expect(seen).toMatchObject({ url: `/projects/p-1/tasks/import?importId=${importId}`, lines: 5_000 });
    expect(seen?.headers).toMatchObject({ 'content-type': 'application/x-ndjson', authorization: 'Bearer x.y.z', 'transfer-encoding': 'chunked' });
    if (result.ok) expect(checkImportSummary(file, plan, result.summary, UploadKind.first)).toEqual([]);
  });

  it('gives back a refusal with its status and body, without sending the rest of the file', async () => {
    server = createServer((req, res) => {
      res.writeHead(403, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify({ error: { code: 'FORBIDDEN', message: 'no' } }));
      req.resume();
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const result = await uploadImport({ baseUrl, projectId: 'p-1', importId, authorization: () => 'Bearer x', body: () => importFileChunks({ ...file, lines: 200_000 }) });
    expect(result).toEqual({ ok: false, status: 403, body: { error: { code: 'FORBIDDEN', message: 'no' } } });
  });

  it('gives back the wait a busy refusal asks for, so the same upload is sent again no sooner', async () => {
    server = createServer((req, res) => {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '3', connection: 'close' }).end(JSON.stringify({ error: { code: 'IMPORT_BUSY', message: 'busy' } }));
      req.resume();
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const result = await uploadImport({ baseUrl, projectId: 'p-1', importId, authorization: () => 'Bearer x', body: () => importFileChunks(file) });
    expect(result).toEqual({ ok: false, status: 429, body: { error: { code: 'IMPORT_BUSY', message: 'busy' } }, retryAfterMs: 3_000 });
  });
});

describe('the summary check', () => {
  it('passes a right summary, and a re-upload that created nothing', () => {
    expect(checkImportSummary(file, plan, rightSummary(), UploadKind.first)).toEqual([]);
    const again = { ...rightSummary(), created: 0, alreadyPresent: plan.distinct + plan.repeats };
    expect(checkImportSummary(file, plan, again, UploadKind.again)).toEqual([]);
  });

  it('names every count that is off, a duplicate task, and an error on a good line', () => {
    const good = [...importLines(file)].find((l) => l.kind === LineKind.repeat);
    const wrong = { ...rightSummary(), created: plan.distinct + 1, alreadyPresent: plan.repeats - 1, errors: [...rightSummary().errors, { line: good?.line ?? 1, code: 'LINE_INVALID', message: 'no' }] };
    expect(checkImportSummary(file, plan, wrong, UploadKind.first)).toEqual([
      `created: ${plan.distinct + 1}, expected ${plan.distinct}`,
      `alreadyPresent: ${plan.repeats - 1}, expected ${plan.repeats}`,
      `${plan.bad + 1} errors reported for ${plan.bad} bad lines`,
      `line ${good?.line} (repeat) was reported as LINE_INVALID: no`,
    ]);
  });
});
