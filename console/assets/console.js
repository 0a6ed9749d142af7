// The Perdure console: a page over the admin endpoint's JSON API (/api/...).
// No framework, no build step: the files are compiled into the library.
'use strict';

const view = document.getElementById('view');

function esc(text) {
  return String(text ?? '').replace(/[&<>"']/g, c => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

function status(s) {
  return `<span class="status s-${esc(s)}">${esc(s)}</span>`;
}

function when(iso) {
  if (!iso) return '';
  return esc(iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z'));
}

function toast(text) {
  const t = document.getElementById('toast');
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}

async function api(path, options = {}) {
  const headers = { 'Accept': 'application/json' };
  const token = localStorage.getItem('perdure-token');
  if (token) headers['Authorization'] = 'Bearer ' + token;
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method: options.method || 'GET', headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  if (res.status === 401) {
    const t = prompt('This action needs the admin token:');
    if (t) { localStorage.setItem('perdure-token', t); return api(path, options); }
  }
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function params(hash) {
  const q = hash.indexOf('?');
  return new URLSearchParams(q < 0 ? '' : hash.slice(q + 1));
}

const filterFields = [
  ['status', 'status', 'any status'], ['workflow', 'text', 'workflow'],
  ['version', 'text', 'app version'], ['executor', 'text', 'executor'],
  ['queue', 'text', 'queue'], ['object', 'text', 'TYPE or TYPE/KEY'],
  ['id_prefix', 'text', 'id prefix'], ['created', 'text', 'created e.g. 2h..'],
];
const statuses = ['ENQUEUED', 'PENDING', 'BLOCKED', 'COMPENSATING', 'SUCCESS', 'ERROR',
  'CANCELLED', 'RETRIES_EXCEEDED', 'COMPENSATED', 'COMPENSATION_FAILED', 'DEAD_LETTER'];

async function runsPage(p) {
  const form = filterFields.map(([name, kind, hint]) => kind === 'status'
    ? `<select name="status"><option value="">${hint}</option>${statuses.map(s =>
        `<option ${p.get('status') === s ? 'selected' : ''}>${s}</option>`).join('')}</select>`
    : `<input name="${name}" placeholder="${hint}" value="${esc(p.get(name) || '')}">`).join('');
  const data = await api('/api/runs?' + p.toString());
  const rows = data.runs.map(r => `<tr class="clickable" data-run="${esc(r.id)}">
      <td class="mono">${esc(r.id)}</td><td>${esc(r.object_type ? r.object_type + '/' + r.object_key + '.' + r.workflow : r.workflow)}</td>
      <td>${status(r.status)}</td><td>${when(r.created_at)}</td><td>${when(r.updated_at)}</td>
      <td class="mono">${esc(r.executor || '-')}</td><td>${esc(r.app_version || '-')}</td>
      <td>${esc((r.error || '').slice(0, 80))}</td></tr>`).join('');
  const next = new URLSearchParams(p);
  if (data.next_cursor) next.set('cursor', data.next_cursor);
  view.innerHTML = `<h1>Runs</h1>
    <form class="filters" id="filters">${form}
      <label><input type="checkbox" name="active" ${p.get('active') ? 'checked' : ''}> not ended</label>
      <button class="primary">Filter</button>
      <button type="button" id="bulk-cancel" class="danger">Cancel matching…</button></form>
    <table id="runs"><thead><tr><th>Id</th><th>Workflow</th><th>Status</th><th>Created</th>
      <th>Updated</th><th>Executor</th><th>Version</th><th>Error</th></tr></thead>
      <tbody>${rows || '<tr><td colspan="8" class="muted">no runs match</td></tr>'}</tbody></table>
    <div class="pager">${data.next_cursor ? `<a href="#/runs?${esc(next.toString())}">next page →</a>` : ''}</div>`;
  const read = () => {
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(document.getElementById('filters')))
      if (v) q.set(k, v === 'on' ? '1' : v);
    return q;
  };
  document.getElementById('filters').onsubmit = e => {
    e.preventDefault();
    location.hash = '#/runs?' + read().toString();
  };
  document.getElementById('bulk-cancel').onclick = async () => {
    const q = read();
    if ([...q.keys()].length === 0) return toast('Set a filter first');
    const look = await api('/api/runs/cancel?dry_run=1&' + q.toString(), { method: 'POST', body: {} });
    if (look.matched === 0) return toast('No unended runs match');
    if (!confirm(`Cancel ${look.matched} runs?`)) return;
    const done = await api('/api/runs/cancel?' + q.toString(), { method: 'POST', body: {} });
    toast(`Cancelled ${done.done} of ${done.matched}`);
    route();
  };
  for (const tr of view.querySelectorAll('tr[data-run]'))
    tr.onclick = () => { location.hash = '#/run/' + encodeURIComponent(tr.dataset.run); };
}

function show(v) {
  if (v === null || v === undefined) return '';
  return esc(typeof v === 'string' ? v : JSON.stringify(v));
}

async function runPage(id) {
  const r = await api('/api/runs/' + encodeURIComponent(id));
  const created = Date.parse(r.created_at);
  const end = Math.max(Date.parse(r.updated_at), ...r.journal.map(e => Date.parse(e.at)), created + 1);
  const span = end - created;
  const steps = r.journal.map(e => {
    const at = Date.parse(e.at), took = e.duration_ms || 0;
    const left = ((at - took - created) / span) * 100, width = Math.max((took / span) * 100, 0.5);
    const cls = e.outcome === 'event' ? 'event' : (e.outcome !== 'value' ? 'failed' : '');
    return `<li class="${cls}" data-seq="${e.seq}"><span class="mono">${e.outcome === 'event' ? '–' : e.seq}</span>
      <span>${esc(e.kind)}</span><span><b>${esc(e.name)}</b> <span class="muted">${esc(e.outcome)}</span>
      ${e.error ? `<div class="s-ERROR">${esc(e.error)}</div>` : ''}
      ${e.reason ? `<div class="muted">${esc(e.reason)}</div>` : ''}
      ${e.result !== undefined && e.result !== null ? `<div class="mono muted">${show(e.result).slice(0, 200)}</div>` : ''}</span>
      <span class="muted">${e.outcome === 'event' ? '' : took + ' ms'}</span>
      <span><div class="bar" style="margin-left:${Math.max(left, 0)}%;width:${width}%"></div></span></li>`;
  }).join('');
  const ended = ['SUCCESS', 'ERROR', 'CANCELLED', 'RETRIES_EXCEEDED', 'COMPENSATED',
    'COMPENSATION_FAILED', 'DEAD_LETTER'].includes(r.status);
  const resumable = ['ERROR', 'CANCELLED', 'RETRIES_EXCEEDED', 'DEAD_LETTER', 'BLOCKED'].includes(r.status);
  view.innerHTML = `<h1>Run <span class="mono" id="run-id">${esc(r.id)}</span> ${status(r.status)}</h1>
    <div class="actions">
      ${!ended ? '<button class="danger" id="cancel">Cancel</button>' : ''}
      ${resumable ? '<button class="primary" id="resume">Resume</button>' : ''}
      ${resumable ? '<button id="fork">Fork from last failure</button>' : ''}
      <a href="/api/runs/${encodeURIComponent(r.id)}/export" download="${esc(r.id)}.json"><button>Export</button></a>
    </div>
    <dl class="fields">
      <dt>Workflow</dt><dd>${esc(r.workflow)}</dd>
      <dt>Version</dt><dd>${esc(r.app_version || '-')}</dd>
      <dt>Owner</dt><dd class="mono">${esc(r.executor || 'none')} (epoch ${r.epoch})</dd>
      <dt>Created</dt><dd>${when(r.created_at)}</dd><dt>Updated</dt><dd>${when(r.updated_at)}</dd>
      ${r.parent_id ? `<dt>Parent</dt><dd><a href="#/run/${encodeURIComponent(r.parent_id)}">${esc(r.parent_id)}</a></dd>` : ''}
      ${r.queue ? `<dt>Queue</dt><dd>${esc(r.queue)} (attempt ${r.attempts})</dd>` : ''}
      ${r.saga_phase ? `<dt>Saga phase</dt><dd>${esc(r.saga_phase)}</dd>` : ''}
      <dt>Inputs</dt><dd class="mono">${show(r.inputs)}</dd>
      ${r.output !== null ? `<dt>Output</dt><dd class="mono">${show(r.output)}</dd>` : ''}
      ${r.error ? `<dt>Error</dt><dd class="s-ERROR">${esc(r.error)}</dd>` : ''}
    </dl>
    <h2>Journal (${r.journal.length})</h2>
    <ul class="timeline" id="journal">${steps || '<li class="muted">nothing recorded yet</li>'}</ul>
    ${r.children.length ? `<h2>Children</h2><table><tbody>${r.children.map(c =>
      `<tr class="clickable" data-run="${esc(c.id)}"><td class="mono">${esc(c.id)}</td><td>${esc(c.workflow)}</td><td>${status(c.status)}</td></tr>`).join('')}</tbody></table>` : ''}
    ${r.waits.length ? `<h2>Waiting on</h2><ul>${r.waits.map(w => `<li>${esc(w.kind)} <span class="mono">${esc(w.what)}</span></li>`).join('')}</ul>` : ''}
    ${r.undo_stack.length ? `<h2>Saga undo stack</h2><ul>${r.undo_stack.map(s => `<li class="mono">undo:${esc(s)}</li>`).join('')}</ul>` : ''}`;
  const act = (btn, path, body, what) => {
    const b = document.getElementById(btn);
    if (!b) return;
    b.onclick = async () => {
      try {
        const out = await api(`/api/runs/${encodeURIComponent(r.id)}/${path}`, { method: 'POST', body });
        toast(what + (out.fork ? ': ' + out.fork : ''));
        if (out.fork) location.hash = '#/run/' + encodeURIComponent(out.fork); else setTimeout(route, 300);
      } catch (e) { toast(e.message); }
    };
  };
  act('cancel', 'cancel', {}, 'Cancelled');
  act('resume', 'resume', { reason: 'resumed from the console' }, 'Resumed');
  act('fork', 'fork', { from_last_failure: true, reason: 'forked from the console' }, 'Forked');
  for (const tr of view.querySelectorAll('tr[data-run]'))
    tr.onclick = () => { location.hash = '#/run/' + encodeURIComponent(tr.dataset.run); };
}

function table(headers, rows) {
  return `<table><thead><tr>${headers.map(h => `<th>${esc(h)}</th>`).join('')}</tr></thead>
    <tbody>${rows.length ? rows.join('') : `<tr><td colspan="${headers.length}" class="muted">none</td></tr>`}</tbody></table>`;
}

async function queuesPage() {
  const data = await api('/api/queues');
  const limits = l => [l.concurrency !== null ? `concurrency ${l.concurrency}` : '',
    l.partition_concurrency !== null ? `${l.partition_concurrency} per partition` : '',
    l.rate_limit !== null ? `${l.rate_limit} per ${l.rate_period_ms} ms` : ''].filter(Boolean).join(', ') || 'none';
  view.innerHTML = `<h1>Queues</h1>` + table(['Queue', 'Ready', 'Delayed', 'Running', 'Throttled', 'Dead letters', 'Limits'],
    data.queues.map(q => `<tr><td>${esc(q.name)}</td><td>${q.ready}</td><td>${q.delayed}</td><td>${q.running}</td>
      <td>${q.throttled}</td><td>${q.dead_letters ? `<a href="#/runs?queue=${encodeURIComponent(q.name)}&status=DEAD_LETTER">${q.dead_letters}</a>` : 0}</td>
      <td>${esc(limits(q.limits))}</td></tr>`));
}

async function objectsPage(p) {
  const type = p.get('type') || '';
  let body = `<h1>Objects</h1><form class="filters" id="pick"><input name="type" placeholder="object type" value="${esc(type)}">
    <input name="key" placeholder="key" value="${esc(p.get('key') || '')}"><button class="primary">Show</button></form>`;
  if (type && p.get('key')) {
    const key = p.get('key');
    const base = `/api/objects/${encodeURIComponent(type)}/${encodeURIComponent(key)}`;
    const state = await api(base).catch(e => ({ error: e.message }));
    const calls = await api(base + '/calls');
    body += `<h2>State of ${esc(type)}/${esc(key)}</h2><pre class="mono">${esc(state.error || JSON.stringify(state.state, null, 2))}</pre>
      <h2>Calls</h2>` + table(['Id', 'Handler', 'Status', 'Created'], calls.calls.map(c =>
        `<tr class="clickable" data-run="${esc(c.id)}"><td class="mono">${esc(c.id)}</td><td>${esc(c.workflow)}</td><td>${status(c.status)}</td><td>${when(c.created_at)}</td></tr>`));
  } else if (type) {
    const keys = await api(`/api/objects/${encodeURIComponent(type)}`);
    body += table(['Key'], keys.keys.map(k => `<tr class="clickable" data-key="${esc(k)}"><td class="mono">${esc(k)}</td></tr>`));
  }
  view.innerHTML = body;
  document.getElementById('pick').onsubmit = e => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(e.target)) if (v) q.set(k, v);
    location.hash = '#/objects?' + q.toString();
  };
  for (const tr of view.querySelectorAll('tr[data-key]'))
    tr.onclick = () => { location.hash = `#/objects?type=${encodeURIComponent(type)}&key=${encodeURIComponent(tr.dataset.key)}`; };
  for (const tr of view.querySelectorAll('tr[data-run]'))
    tr.onclick = () => { location.hash = '#/run/' + encodeURIComponent(tr.dataset.run); };
}

async function executorsPage() {
  const data = await api('/api/executors');
  view.innerHTML = `<h1>Executors</h1>` + table(['Executor', 'State', 'Version', 'Epoch', 'Heartbeat age', 'Runs held', 'Started'],
    data.executors.map(e => `<tr><td class="mono">${esc(e.id)}</td><td>${esc(e.state)}${e.overdue ? ' (overdue)' : ''}</td>
      <td>${esc(e.app_version || '-')}</td><td>${e.epoch}</td><td>${(e.heartbeat_age_ms / 1000).toFixed(1)} s</td>
      <td>${e.runs_held}</td><td>${when(e.started_at)}</td></tr>`));
}

async function versionsPage() {
  const data = await api('/api/versions');
  view.innerHTML = `<h1>Versions</h1>` + table(['Version', 'Live', 'Pending', 'Enqueued', 'Blocked', 'Oldest', 'Stranded'],
    data.versions.map(v => `<tr><td>${esc(v.app_version || '(none)')}</td><td>${v.live_executors}</td><td>${v.pending}</td>
      <td>${v.enqueued}</td><td>${v.blocked}</td><td>${when(v.oldest_run)}</td><td>${v.stranded ? '<b class="s-ERROR">yes</b>' : 'no'}</td></tr>`));
}

async function health() {
  try {
    const r = await fetch('/readyz');
    document.getElementById('health').textContent = r.ok ? '● ready' : '● not ready';
  } catch (e) {
    document.getElementById('health').textContent = '● unreachable';
  }
}

async function route() {
  const hash = location.hash || '#/runs';
  const path = hash.slice(2).split('?')[0];
  for (const a of document.querySelectorAll('nav a'))
    a.classList.toggle('active', path.startsWith(a.dataset.nav));
  try {
    if (path.startsWith('run/')) await runPage(decodeURIComponent(path.slice(4)));
    else if (path === 'queues') await queuesPage();
    else if (path === 'objects') await objectsPage(params(hash));
    else if (path === 'executors') await executorsPage();
    else if (path === 'versions') await versionsPage();
    else await runsPage(params(hash));
  } catch (e) {
    view.innerHTML = `<h1>Error</h1><p class="s-ERROR" id="error">${esc(e.message)}</p>`;
  }
  health();
}

window.addEventListener('hashchange', route);
route();
