import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ADMIN, eventually, repoRoot, startStack, tokenFor, type TestStack } from '@labelflow/testing';
import { claim, createProject, createTask, review, submitLabels, waitForStatus } from './saga';

/** Debian's chromium (scripts/ensure-chromium.sh installs it): playwright-core downloads no browser. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SCREENSHOT = join(repoRoot, 'test-results', 'timeline-page.png');
const JAEGER = 'http://127.0.0.1:16686';

interface TimelineView {
  readonly events: readonly { type: string; attempt: number; traceId: string | null }[];
}

describe('the saga timeline page (GET /ui of apps/saga-monitor) in Chromium', () => {
  const infra = inject('infra');
  let stack: TestStack;
  let browser: Browser | undefined;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`no browser at ${CHROMIUM}: run bash scripts/ensure-chromium.sh (npm test does) or set CHROMIUM_PATH`);
    stack = await startStack(infra, { 'billing-svc': { FAULT_BILLING_FAILURE_PREFIX: 'fail-' } }, { monitor: { JAEGER_URL: JAEGER } });
  });
  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  });

  it('shows a saga rejected once and failed in billing on its rework: the rejection, the reopened attempt and the billing failure', async () => {
    // Attempt 1 is rejected; attempt 2 is approved, and billing fails for this annotator (fault injection).
    const projectId = await createProject(stack, 10_000, 300);
    const taskId = await createTask(stack, projectId, 'is there a cat? (timeline page)');
    await claim(stack, taskId, 'fail-ann');
    // The labelling tool sends its trace: the events that follow from it carry its id, which the page links to Jaeger.
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    await submitLabels(stack, taskId, 'fail-ann', undefined, { traceparent: `00-${traceId}-b7ad6b7169203331-01` });
    await review(stack, taskId, 'reject', 'the box misses the tail');
    await eventually(async () => expect((await stack.http('task-svc').get<{ status: string; attempt: number }>(`/tasks/${taskId}`)).body).toMatchObject({ status: 'open', attempt: 2 }));
    await claim(stack, taskId, 'fail-ann');
    await submitLabels(stack, taskId, 'fail-ann', { attempt: 2, annotations: [{ label: 'cat', confidence: 0.95 }] });
    await review(stack, taskId, 'approve', undefined, 2);
    await waitForStatus(stack, taskId, 'failed');
    const { taskNumber } = (await stack.http('task-svc').get<{ taskNumber: string }>(`/tasks/${taskId}`)).body;
    // The page shows what the monitor has consumed, read from four topics in no fixed order between
    // them: wait until it has read every event of the saga (it then has one of each service and
    // the end of the saga), so the page loaded next shows the same events.
    await stack.quiesce();
    const traced = await eventually(async () => {
      const saga = (await stack.monitorHttp().get<TimelineView>(`/sagas/${taskId}`)).body;
      expect(saga.events?.map((e) => e.type)).toEqual(expect.arrayContaining(['LabelSubmitted', 'QaRejected', 'TaskReopened', 'BillingFailed', 'TaskFailed']));
      return saga.events.filter((e) => e.traceId !== null).length;
    });

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
    await page.goto(`${stack.monitor!.url}/ui`);
    await page.fill('#token', await tokenFor(ADMIN));
    await page.click('#save-token');
    await page.fill('#search', taskNumber.toLowerCase());
    await page.click('#search-button');
    await page.waitForSelector('#timeline tbody tr.event-row[data-type="TaskFailed"]', { timeout: 15_000 });

    const rows = await page.$$eval('#timeline tbody tr.event-row', (trs) =>
      trs.map((tr) => ({ type: tr.getAttribute('data-type'), attempt: Number(tr.getAttribute('data-attempt')), text: tr.textContent ?? '', link: tr.querySelector('a')?.getAttribute('href') ?? null })),
    );
    const row = (type: string, attempt: number) => rows.find((r) => r.type === type && r.attempt === attempt);
    expect(row('QaRejected', 1)?.text).toContain('the box misses the tail');
    expect(row('TaskReopened', 2)?.text).toContain('QA_REJECTED');
    expect(row('BillingFailed', 2)?.text).toContain('INJECTED_FAILURE');
    expect(row('TaskFailed', 2)).toBeDefined();
    // In the order they happened, across the four services.
    const order = rows.map((r) => r.type);
    expect(order.indexOf('QaRejected')).toBeLessThan(order.indexOf('TaskReopened'));
    expect(order.indexOf('TaskReopened')).toBeLessThan(order.indexOf('BillingFailed'));
    expect(new Set(rows.map((r) => r.text.match(/(task|label|qa|billing)-svc/)?.[0]))).toEqual(new Set(['task-svc', 'label-svc', 'qa-svc', 'billing-svc']));
    // Each attempt has its heading, the first saying how it ended.
    const attempts = await page.$$eval('#timeline tbody tr.attempt-row', (trs) => trs.map((tr) => tr.textContent ?? ''));
    expect(attempts).toEqual([expect.stringMatching(/attempt 1 — reopened: QA_REJECTED/), expect.stringMatching(/attempt 2 — TaskFailed/)]);
    // Events that travelled with a trace link to it in Jaeger.
    const links = rows.flatMap((r) => (r.link ? [r.link] : []));
    expect(links).toHaveLength(traced);
    expect(row('LabelSubmitted', 1)?.link).toBe(`${JAEGER}/trace/${traceId}`);
    for (const link of links) expect(link).toMatch(new RegExp(`^${JAEGER}/trace/[0-9a-f]{32}$`));
    expect(await page.textContent('#summary-outcome')).toBe('failed');
    expect(await page.textContent('#summary-compensations')).toBe('1');

    mkdirSync(join(repoRoot, 'test-results'), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(existsSync(SCREENSHOT)).toBe(true);
  });
});
