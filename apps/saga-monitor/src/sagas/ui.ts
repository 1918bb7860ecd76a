import { createHash } from 'node:crypto';

/**
 * The saga timeline page: one self-contained HTML document, no framework and no external asset, so
 * it loads at once and works offline on a laptop. It holds no data: the token typed into it stays
 * in the tab's sessionStorage and goes as a bearer token with every API call (GET /sagas,
 * /sagas/:taskId, /sagas/alerts). Data is written with textContent only, never as HTML.
 */
export function renderPage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>labelflow · saga monitor</title>
<style>
  :root { --fg: #1d2430; --muted: #667085; --line: #e4e7ec; --bg: #f8f9fb; --accent: #2952cc; --bad: #b42318; --warn: #b54708; --good: #067647; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
  header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 10px 16px; background: #fff; border-bottom: 1px solid var(--line); }
  header h1 { font-size: 16px; margin: 0 12px 0 0; }
  form { display: flex; gap: 6px; align-items: center; margin: 0; }
  input { font: inherit; padding: 5px 8px; border: 1px solid #cfd4dc; border-radius: 6px; }
  #token { width: 220px; } #search { width: 280px; }
  button { font: inherit; padding: 5px 12px; border: 1px solid var(--accent); background: var(--accent); color: #fff; border-radius: 6px; cursor: pointer; }
  button.quiet { background: #fff; color: var(--accent); }
  main { display: grid; grid-template-columns: minmax(0, 1fr) 320px; gap: 16px; padding: 16px; }
  @media (max-width: 1000px) { main { grid-template-columns: 1fr; } }
  section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; min-width: 0; }
  h2 { font-size: 14px; margin: 0 0 8px; }
  .muted { color: var(--muted); }
  #status { margin-left: auto; color: var(--muted); }
  #status.error { color: var(--bad); }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 12px; }
  dt { color: var(--muted); } dd { margin: 0; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
  th { font-weight: 600; color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
  td.time, td.service, td.event { white-space: nowrap; }
  td.time { font-variant-numeric: tabular-nums; }
  td.num { text-align: right; }
  tr.attempt-row td { background: #f2f4f7; font-weight: 600; }
  tr.kind-rejection td.event { color: var(--warn); font-weight: 600; }
  tr.kind-failure td.event, tr.kind-outcome.type-TaskFailed td.event, tr.kind-outcome.type-TaskCancelled td.event { color: var(--bad); font-weight: 600; }
  tr.kind-compensation td.event { color: #6941c6; font-weight: 600; }
  tr.type-TaskCompleted td.event { color: var(--good); font-weight: 600; }
  code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
  ul { list-style: none; padding: 0; margin: 0; }
  li { padding: 6px 0; border-bottom: 1px solid var(--line); }
  li a { color: var(--accent); cursor: pointer; text-decoration: none; }
  .pill { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 12px; background: #f2f4f7; }
  .pill.alerting { background: #fee4e2; color: var(--bad); }
  .pill.overdue { background: #fef0c7; color: var(--warn); }
</style>
</head>
<body>
<header>
  <h1>labelflow · saga monitor</h1>
  <form id="token-form" autocomplete="off">
    <input id="token" type="password" placeholder="bearer token" aria-label="bearer token">
    <button id="save-token" type="submit" class="quiet">Use token</button>
  </form>
  <form id="search-form">
    <input id="search" type="search" placeholder="task id or number (e.g. PRJ-17)" aria-label="task id or number">
    <button id="search-button" type="submit">Search</button>
  </form>
  <span id="status" role="status"></span>
</header>
<main>
  <section id="saga" aria-live="polite">
    <h2 id="saga-title">Timeline</h2>
    <p id="saga-empty" class="muted">Enter a token, then search a task by id or number.</p>
    <ul id="results"></ul>
    <dl id="summary" hidden></dl>
    <table id="timeline" hidden>
      <thead><tr><th>time</th><th>service</th><th>event</th><th>attempt</th><th>details</th><th>trace</th></tr></thead>
      <tbody></tbody>
    </table>
    <div id="watches"></div>
    <div id="dead-letters"></div>
  </section>
  <section id="alerts-panel">
    <h2>Stuck or alerting sagas <span id="alerts-count" class="pill">0</span></h2>
    <ul id="alerts"><li class="muted">none</li></ul>
    <h2 style="margin-top:16px">Recent sagas</h2>
    <ul id="recent"><li class="muted">none</li></ul>
  </section>
</main>
<script>
(function () {
  'use strict';
  var KEY = 'labelflow.monitor.token';
  var $ = function (id) { return document.getElementById(id); };
  var token = sessionStorage.getItem(KEY) || '';
  $('token').value = token;

  function status(text, error) { var s = $('status'); s.textContent = text; s.className = error ? 'error' : ''; }
  function el(tag, text, cls) { var e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function time(iso) { var d = new Date(iso); return d.toISOString().replace('T', ' ').replace('Z', ''); }

  function api(path) {
    if (!token) return Promise.reject(new Error('enter a token first'));
    return fetch(path, { headers: { authorization: 'Bearer ' + token } }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (!r.ok) throw new Error((body && body.error && (body.error.code + ': ' + body.error.message)) || ('HTTP ' + r.status));
        return body;
      });
    });
  }

  function sagaLink(s, label) {
    var a = el('a', label);
    a.href = '#task=' + encodeURIComponent(s.taskId);
    a.addEventListener('click', function (ev) { ev.preventDefault(); openSaga(s.taskId); });
    return a;
  }

  function showSaga(saga) {
    location.hash = 'task=' + encodeURIComponent(saga.taskId);
    clear($('results'));
    $('saga-empty').hidden = true;
    $('saga-title').textContent = 'Timeline of task ' + (saga.taskNumber ? saga.taskNumber + ' · ' : '') + saga.taskId;
    var dl = $('summary'); clear(dl); dl.hidden = false;
    var facts = [
      ['title', saga.title || ''], ['project', saga.projectId], ['attempt', saga.attempt], ['now at', saga.lastEventType],
      ['outcome', saga.outcome || 'in progress'], ['events', saga.eventCount], ['compensations', saga.compensations],
      ['duplicates dropped', saga.duplicatesDropped], ['dead letters', saga.deadLetters.length],
      ['attempts', saga.attempts.map(function (a) { return a.attempt + (a.ended ? ' (' + a.ended + ')' : ''); }).join(', ')]
    ];
    facts.forEach(function (f) { dl.appendChild(el('dt', f[0])); var dd = el('dd', f[1]); dd.id = 'summary-' + f[0].replace(/ /g, '-'); dl.appendChild(dd); });
    var body = $('timeline').tBodies[0]; clear(body); $('timeline').hidden = false;
    // One heading per attempt, as the saga reaches it: an event of an older attempt that arrives late
    // (a QaStarted after the reopen) stays under the newer heading, marked late, not a new heading.
    var attempt = 0;
    saga.events.forEach(function (e) {
      if (e.attempt > attempt) {
        attempt = e.attempt;
        var info = saga.attempts.filter(function (a) { return a.attempt === attempt; })[0];
        var head = el('tr', null, 'attempt-row'); head.dataset.attempt = String(attempt);
        var cell = el('td', 'attempt ' + attempt + (info && info.ended ? ' — ' + info.ended : '')); cell.colSpan = 6;
        head.appendChild(cell); body.appendChild(head);
      }
      var tr = el('tr', null, 'event-row kind-' + e.kind + ' type-' + e.type);
      tr.dataset.type = e.type; tr.dataset.attempt = String(e.attempt);
      tr.appendChild(el('td', time(e.occurredAt), 'time'));
      tr.appendChild(el('td', e.service, 'service'));
      tr.appendChild(el('td', e.type + (e.version > 1 ? ' v' + e.version : ''), 'event'));
      tr.appendChild(el('td', e.attempt < attempt ? e.attempt + ' (late)' : e.attempt, 'num'));
      tr.appendChild(el('td', e.details));
      var trace = el('td', null, 'mono');
      if (e.traceUrl) { var a = el('a', e.traceId.slice(0, 12) + '…'); a.href = e.traceUrl; a.target = '_blank'; a.rel = 'noopener'; trace.appendChild(a); }
      else if (e.traceId) trace.textContent = e.traceId.slice(0, 12) + '…';
      tr.appendChild(trace);
      body.appendChild(tr);
    });
    var watches = $('watches'); clear(watches);
    if (saga.watches.length > 0) {
      watches.appendChild(el('h2', 'Waiting for'));
      var ul = el('ul');
      saga.watches.forEach(function (w) {
        var li = el('li', w.step + ' of attempt ' + w.attempt + ', due ' + time(w.dueAt) + ' ');
        li.appendChild(el('span', w.alerting ? 'alerting' : 'on time', 'pill' + (w.alerting ? ' alerting' : '')));
        ul.appendChild(li);
      });
      watches.appendChild(ul);
    }
    var dead = $('dead-letters'); clear(dead);
    if (saga.deadLetters.length > 0) {
      dead.appendChild(el('h2', 'Dead letters'));
      var dl2 = el('ul');
      saga.deadLetters.forEach(function (d) {
        var li = el('li', (d.failedAt ? time(d.failedAt) + ' ' : '') + d.service + ' could not process ' + (d.eventType || 'a message') + ': ' + d.code + (d.reason ? ' ' + d.reason + ' (' + d.topic + ' ' + d.id + ')' : ''));
        li.className = 'dead-letter';
        dl2.appendChild(li);
      });
      dead.appendChild(dl2);
    }
    status('task ' + saga.taskId + ': ' + saga.events.length + ' events');
  }

  function openSaga(taskId) {
    status('loading…');
    return api('/sagas/' + encodeURIComponent(taskId)).then(showSaga, function (e) { status(e.message, true); });
  }

  function search(q) {
    status('searching…');
    return api('/sagas?search=' + encodeURIComponent(q)).then(function (body) {
      var results = $('results'); clear(results);
      if (body.sagas.length === 1) return openSaga(body.sagas[0].taskId);
      if (body.sagas.length === 0) { status('no saga matches ' + q, true); return; }
      body.sagas.forEach(function (s) { var li = el('li'); li.appendChild(sagaLink(s, (s.taskNumber || s.taskId) + ' · ' + (s.title || ''))); results.appendChild(li); });
      status(body.sagas.length + ' sagas match');
    }, function (e) { status(e.message, true); });
  }

  var ALERTS_SHOWN = 200;

  function refreshLists() {
    if (!token) return;
    // The list is a page of the oldest: a full page says "at least", not how many.
    api('/sagas/alerts?limit=' + ALERTS_SHOWN).then(function (body) {
      var ul = $('alerts'); clear(ul);
      // Rows are watches: one saga may wait for two steps (a refund beside its next step).
      var sagas = {}; body.alerts.forEach(function (a) { sagas[a.taskId] = true; });
      var count = Object.keys(sagas).length;
      $('alerts-count').textContent = body.alerts.length >= ALERTS_SHOWN ? count + '+' : String(count);
      $('alerts-count').className = 'pill' + (body.alerts.length > 0 ? ' alerting' : '');
      if (body.alerts.length === 0) ul.appendChild(el('li', 'none', 'muted'));
      body.alerts.forEach(function (a) {
        var li = el('li'); li.dataset.taskId = a.taskId;
        li.appendChild(sagaLink(a, a.taskNumber || a.taskId));
        li.appendChild(el('span', ' waits for ' + a.step + ' (attempt ' + a.attempt + ') since ' + time(a.since) + ' '));
        li.appendChild(el('span', a.alerting ? 'alerting' : 'overdue', 'pill ' + (a.alerting ? 'alerting' : 'overdue')));
        ul.appendChild(li);
      });
    }, function (e) { status(e.message, true); });
    api('/sagas?limit=15').then(function (body) {
      var ul = $('recent'); clear(ul);
      if (body.sagas.length === 0) ul.appendChild(el('li', 'none', 'muted'));
      body.sagas.forEach(function (s) {
        var li = el('li'); li.appendChild(sagaLink(s, s.taskNumber || s.taskId));
        li.appendChild(el('span', ' ' + s.lastEventType + (s.outcome ? ' · ' + s.outcome : ''), 'muted'));
        ul.appendChild(li);
      });
    }, function () { /* the alerts call reports the error */ });
  }

  $('token-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    token = $('token').value.trim();
    if (token) sessionStorage.setItem(KEY, token); else sessionStorage.removeItem(KEY);
    status(token ? 'token set' : 'token cleared');
    refreshLists();
  });
  $('search-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var q = $('search').value.trim();
    if (q) search(q);
  });
  setInterval(refreshLists, 5000);
  refreshLists();
  var fromHash = /^#task=(.+)$/.exec(location.hash);
  if (fromHash && token) openSaga(decodeURIComponent(fromHash[1]));
})();
</script>
</body>
</html>
`;
}

/**
 * The page's Content-Security-Policy: its one inline script by hash, its inline styles, calls to
 * its own origin only, nothing else, and no framing. The page writes data with textContent; the
 * policy is what still holds if a later change ever slips markup in, so the token in
 * sessionStorage cannot be read by a script the page did not ship.
 */
export function pageSecurityPolicy(page: string): string {
  const script = /<script>([\s\S]*?)<\/script>/.exec(page)?.[1];
  if (script === undefined) throw new Error('the monitor page has no inline script to allow');
  const hash = createHash('sha256').update(script, 'utf8').digest('base64');
  return [`default-src 'none'`, `script-src 'sha256-${hash}'`, `style-src 'unsafe-inline'`, `connect-src 'self'`, `base-uri 'none'`, `form-action 'none'`, `frame-ancestors 'none'`].join('; ');
}
