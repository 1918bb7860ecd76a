// `npm run produce -- --import N`: one project, one generated NDJSON file streamed to the bulk
// import endpoint as a project manager, the server's summary checked against what the file holds.
import { randomUUID } from 'node:crypto';
import { client, type Call } from './http';
import { adminOf, type Signer } from './identity';
import { importFileChunks, planImportFile, type ImportFileOptions, type ImportFilePlan } from './ndjson';
import { signingHint } from './run';
import { checkImportSummary, ImportSummary, uploadImport, UploadKind, type UploadResult } from './upload';

/** How long an upload waits in all for a busy instance's slot before it gives up. */
const BUSY_WAIT_MS = 600_000;

/** A 429 whose error code is IMPORT_BUSY: the upload was not read and is welcome again after Retry-After. */
const importBusy = (body: unknown): boolean => (body as { error?: { code?: unknown } } | undefined)?.error?.code === 'IMPORT_BUSY';

export interface ImportRunOptions {
  readonly urls: { readonly task: string; readonly billing: string };
  readonly signer: Signer;
  readonly lines: number;
  readonly repeat: number;
  readonly bad: number;
  readonly reupload: boolean;
  readonly seed: number;
  readonly price: number;
  /** Uploads of one file after a dropped connection (same import id: the endpoint resumes). Default 3. */
  readonly retries?: number;
  readonly onProgress?: (progress: ImportSummary) => void;
  readonly onNote?: (note: string) => void;
}

export interface UploadReport {
  readonly kind: UploadKind;
  readonly importId: string;
  readonly summary: ImportSummary;
  readonly ms: number;
  /** Connections that dropped and were resumed by uploading the same file again. */
  readonly resumed: number;
  readonly problems: readonly string[];
}

export interface ImportRunSummary {
  readonly projectId: string;
  readonly manager: string;
  readonly plan: ImportFilePlan;
  readonly file: ImportFileOptions;
  readonly uploads: readonly UploadReport[];
  /** Whether every upload's summary matched the file. */
  readonly ok: boolean;
}

export const IMPORT_MANAGER = 'import-manager';

/** Creates a funded project, uploads the file (and again with `reupload`), checks each summary. */
export async function runImport(o: ImportRunOptions): Promise<ImportRunSummary> {
  const admin = adminOf(o.signer);
  const billing = client(o.urls.billing, { authorization: admin.authorization });
  const created = await billing<{ projectId: string }>('POST', '/projects', { name: `produce --import ${new Date().toISOString()}`, budget: o.price * o.lines, pricePerTask: o.price });
  if (created.status === 401) throw new Error(`cannot create a project: the services refuse the producer's token (${JSON.stringify(created.body)}); they must trust the key it signs with (${signingHint})`);
  if (created.status !== 201) throw new Error(`cannot create a project: ${created.status} ${JSON.stringify(created.body)}`);
  const projectId = created.body.projectId;
  const manager = o.signer.actor({ subject: IMPORT_MANAGER, projects: { [projectId]: 'manager' } });
  const task = client(o.urls.task, { authorization: manager.authorization });
  // The tag makes this run's external ids its own: a second run in the same project would find none of them.
  const file: ImportFileOptions = { lines: o.lines, repeat: o.repeat, bad: o.bad, seed: o.seed, tag: `p${o.seed}-${randomUUID().slice(0, 8)}` };
  const plan = planImportFile(file);
  const uploads: UploadReport[] = [];
  for (const kind of o.reupload ? [UploadKind.first, UploadKind.again] : [UploadKind.first]) {
    const importId = randomUUID();
    const t0 = Date.now();
    const { summary, resumed } = await uploadWithResume(o, task, { projectId, importId, authorization: manager.authorization, file });
    uploads.push({ kind, importId, summary, ms: Date.now() - t0, resumed, problems: checkImportSummary(file, plan, summary, kind) });
  }
  return { projectId, manager: IMPORT_MANAGER, plan, file, uploads, ok: uploads.every((u) => u.problems.length === 0) };
}

async function uploadWithResume(
  o: ImportRunOptions,
  task: Call,
  u: { projectId: string; importId: string; authorization: () => Promise<string>; file: ImportFileOptions },
): Promise<{ summary: ImportSummary; resumed: number }> {
  const retries = o.retries ?? 3;
  // Progress while the body streams: the summary endpoint answers mid-import.
  const poll = setInterval(() => {
    task<unknown>('GET', `/projects/${u.projectId}/imports/${u.importId}`)
      .then((res) => {
        const progress = res.status === 200 ? ImportSummary.safeParse(res.body) : undefined;
        if (progress?.success) o.onProgress?.(progress.data);
      })
      .catch(() => undefined);
  }, 1_000);
  try {
    // A busy instance read nothing: waiting for a slot is neither a resume nor a try used up, only
    // bounded in time on its own.
    let busyWaitedMs = 0;
    for (let attempt = 0; ; attempt++) {
      let result: UploadResult;
      try {
        result = await uploadImport({ baseUrl: o.urls.task, projectId: u.projectId, importId: u.importId, authorization: u.authorization, body: () => importFileChunks(u.file) });
      } catch (error) {
        if (attempt >= retries) throw new Error(`the import upload failed ${attempt + 1} times, last: ${(error as Error).message}`);
        o.onNote?.(`the upload's connection failed (${(error as Error).message}); uploading the same file again under import ${u.importId}, which resumes it`);
        continue;
      }
      if (result.ok) return { summary: result.summary, resumed: attempt };
      // 429 IMPORT_BUSY: the instance, the project or this caller runs as many uploads as allowed.
      if (result.status === 429 && importBusy(result.body) && busyWaitedMs < BUSY_WAIT_MS) {
        const waitMs = result.retryAfterMs ?? 5_000;
        busyWaitedMs += waitMs;
        o.onNote?.(`the import answered 429 IMPORT_BUSY; uploading again in ${waitMs / 1000} s`);
        await new Promise((r) => setTimeout(r, waitMs));
        attempt--;
        continue;
      }
      // 503: a dependency was briefly away; 409: an earlier upload of this import still holds it.
      if ((result.status === 503 || result.status === 409) && attempt < retries) {
        o.onNote?.(`the import answered ${result.status} ${JSON.stringify(result.body)}; uploading again in 2 s`);
        await new Promise((r) => setTimeout(r, 2_000));
        continue;
      }
      throw new Error(`the import was refused: ${result.status} ${JSON.stringify(result.body).slice(0, 2_000)}`);
    }
  } finally {
    clearInterval(poll);
  }
}
