// The dashboard of cbctl serve. Every piece of data reaches the page as
// text (textContent, attribute values), never as markup: a scope may hold
// anything.
'use strict';

const $ = (id) => document.getElementById(id);
const STATES = ['corrupt', 'isolated', 'open', 'half-open', 'disabled', 'closed'];
const SYMBOL = { closed: '✓', open: '✕', 'half-open': '◐', isolated: '■', disabled: '○', corrupt: '⚠' };

const ui = {
  info: null,
  page: 1, size: 100, sort: 'state', q: '',
  offset: 0,         // server clock minus this browser's, in ms
  tiles: new Map(),  // scope -> tile element of the page shown
  rows: new Map(),   // scope -> row shown
  loadSeq: 0, shownSeq: 0, loadTimer: null,
  // heard: scope -> ui.loadSeq when the event stream last changed its row.
  // A listing asked for before then may have been read before the change.
  heard: new Map(),
  acting: null,      // {op, row} of the open dialog
};

// el makes an element with a class and a text.
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

async function api(path, opts) {
  const res = await fetch(path, Object.assign({ credentials: 'same-origin' }, opts || {}));
  let body = null;
  try { body = await res.json(); } catch (e) { /* no body */ }
  if (!res.ok) {
    const err = new Error((body && body.error) || (res.status + ' ' + res.statusText));
    err.status = res.status;
    err.body = body;
    throw err;
  }
  return body;
}

function post(path, body) {
  return api(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-CBCTL-CSRF': ui.info ? ui.info.csrf : '' },
    body: JSON.stringify(body),
  });
}

async function start() {
  try {
    ui.info = await api('/api/info');
  } catch (e) {
    if (e.status === 401) { showLogin(); return; }
    setLive(false, e.message);
    return;
  }
  $('login').hidden = true;
  $('main').hidden = false;
  document.body.classList.toggle('read-only', ui.info.read_only);
  ui.size = ui.info.page_size;
  $('footer').textContent = 'cbctl ' + ui.info.version + ' · window ' + ui.info.window + ' in ' + ui.info.buckets +
    ' buckets · trips at ≥ ' + pct(ui.info.failure_ratio) + ' failures with ≥ ' + ui.info.min_calls +
    ' calls · counts refreshed every ' + ui.info.refresh + ' · ' + ui.size + ' scopes a page' +
    (ui.info.read_only ? ' · read-only' : '');
  connect();
  await load();
  setInterval(tickClocks, 1000);
}

function showLogin() {
  $('main').hidden = true;
  $('login').hidden = false;
  setLive(false, 'logged out');
  $('token').focus();
}

$('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  try {
    await post('/api/login', { token: $('token').value });
    $('token').value = '';
    $('login-error').textContent = '';
    start();
  } catch (e) {
    $('login-error').textContent = e.message;
  }
});

function connect() {
  const es = new EventSource('/api/events');
  es.addEventListener('status', (ev) => {
    const s = JSON.parse(ev.data);
    setLive(s.live, s.feed_error || s.list_error || '');
  });
  es.addEventListener('transition', (ev) => {
    const d = JSON.parse(ev.data);
    logLine(transitionText(d.transition), 'transition');
    if (d.row) showRow(d.row);
    scheduleLoad(500);
  });
  es.addEventListener('row', (ev) => {
    showRow(JSON.parse(ev.data));
    scheduleLoad(500);
  });
  es.addEventListener('action', (ev) => {
    const a = JSON.parse(ev.data);
    logLine(actionText(a), 'action ' + (a.error ? 'failed' : a.durable));
  });
  es.addEventListener('refresh', () => scheduleLoad(0));
  es.onopen = () => scheduleLoad(0); // after a reconnect, read the page again
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) {
      setLive(false, 'event stream closed; reload the page');
    } else {
      setLive(false, 'event stream interrupted; reconnecting');
    }
  };
}

function setLive(live, why) {
  const p = $('live');
  p.className = 'pill ' + (live ? 'live' : 'down');
  p.textContent = live ? 'live' : 'not live' + (why ? ': ' + why : '');
}

function scheduleLoad(delay) {
  if (ui.loadTimer !== null) return;
  ui.loadTimer = setTimeout(() => { ui.loadTimer = null; load(); }, delay);
}

async function load() {
  const seq = ++ui.loadSeq;
  const params = new URLSearchParams({ page: ui.page, size: ui.size, sort: ui.sort, q: ui.q });
  let p;
  try {
    p = await api('/api/scopes?' + params);
  } catch (e) {
    if (e.status === 401) { showLogin(); return; }
    setLive(false, e.message);
    return;
  }
  if (seq < ui.shownSeq) return; // an older answer than the one shown
  ui.shownSeq = seq;
  ui.offset = Date.parse(p.now) - Date.now();
  ui.page = p.page;
  render(p, seq);
}

// render shows page p of the listing asked for as load seq. A row the
// event stream changed after that (a transition heard while the answer
// was on its way) stays as heard, unless the listing has a later
// generation: the answer may have been read before the change.
function render(p, seq) {
  const counts = $('counts');
  counts.replaceChildren();
  for (const s of STATES) {
    const c = el('span', 'count');
    c.append(el('span', 'n', p.states[s] || 0), ' ' + s);
    counts.append(c);
  }
  const first = p.matched === 0 ? 0 : (p.page - 1) * p.size + 1;
  $('pageinfo').textContent = first + '–' + (first + p.rows.length - (p.rows.length ? 1 : 0)) + ' of ' + p.matched +
    (p.matched !== p.scopes ? ' (of ' + p.scopes + ')' : '') + ' · page ' + p.page + ' of ' + p.pages;
  $('prev').disabled = p.page <= 1;
  $('next').disabled = p.page >= p.pages;
  const shown = new Map(ui.rows);
  ui.tiles.clear();
  ui.rows.clear();
  const frag = document.createDocumentFragment();
  for (let row of p.rows) {
    const heard = shown.get(row.scope);
    if (heard && ui.heard.get(row.scope) >= seq && heard.generation >= row.generation) row = heard;
    const t = tile(row);
    ui.tiles.set(row.scope, t);
    ui.rows.set(row.scope, row);
    frag.append(t);
  }
  if (p.rows.length === 0) frag.append(el('p', 'empty', p.scopes === 0 ? 'No breaker holds state yet.' : 'No scope matches the filter.'));
  $('tiles').replaceChildren(frag);
}

// showRow puts a row heard on the event stream in its tile, if the page
// shows it; the next load puts it in its place in the order.
function showRow(row) {
  const old = ui.tiles.get(row.scope);
  if (!old) return;
  ui.heard.set(row.scope, ui.loadSeq);
  const t = tile(row);
  old.replaceWith(t);
  ui.tiles.set(row.scope, t);
  ui.rows.set(row.scope, row);
}

function tile(row) {
  const t = el('article', 'tile');
  t.dataset.state = row.state;
  t.dataset.scope = row.scope;
  const top = el('div', 'top');
  top.append(el('h3', 'scope', row.scope), el('span', 'state', SYMBOL[row.state] + ' ' + row.state));
  t.append(top);
  if (row.corrupt) {
    // Its stored state cannot be read: nothing else to show, nothing to act on.
    t.append(el('p', 'corrupt', row.corrupt));
    return t;
  }
  const dl = el('dl');
  const item = (k, v) => {
    const dd = el('dd');
    if (v instanceof Node) dd.append(v); else dd.textContent = v;
    dl.append(el('dt', null, k), dd);
    return dd;
  };
  item('generation', row.generation);
  item('window', count(row.calls, 'call') + ' · ' + count(row.failures, 'failure') + ' · ' + row.slow + ' slow' +
    (row.throttled > 0 ? ' · ' + row.throttled + ' throttled' : ''));
  item('failures', ratioView(row));
  if (row.would_reject > 0) {
    // Dry-run replicas (cbgrpc.WithDryRun) let these through.
    item('dry runs would reject', count(row.would_reject, 'call') + ' in this generation');
  }
  if (row.open_until) {
    const cd = el('span', 'countdown');
    cd.dataset.until = String(Date.parse(row.open_until));
    const v = el('span');
    v.append(time(row.open_until) + ' · ', cd);
    item(row.state === 'isolated' ? 'isolated until' : 'open until', v);
  }
  if (row.probes_in_flight !== undefined) item('probes in flight', row.probes_in_flight); // half-open only
  if (row.policies_seen > 1 && row.policy) {
    // Replicas ran different policies in the window: a rolling deploy, or
    // a replica yet to apply an override (cbctl policy show lists them).
    item('policy', row.policies_seen + ' policies · in force ' + row.policy.fingerprint +
      ' (' + row.policy.source + ')').classList.add('drift');
  }
  if (row.last_trip) {
    const ago = el('span', 'ago');
    ago.dataset.at = String(Date.parse(row.last_trip.at));
    const v = el('span');
    v.append(row.last_trip.reason + ' · ' + time(row.last_trip.at) + ' (', ago, ')');
    item('last trip', v);
  }
  if (row.outliers && row.outliers.length > 0) {
    // Replicas failing alone: each rejects its own calls while the fleet's
    // breaker stays as it is.
    const v = el('ul', 'outliers');
    for (const o of row.outliers) v.append(el('li', null, o.replica + ' · ' + o.reason + ' · until ' + time(o.until)));
    item(row.outliers.length === 1 ? 'outlier' : row.outliers.length + ' outliers', v).classList.add('outlier');
  }
  if (row.operator) {
    item('note', (row.operator.by ? 'by ' + row.operator.by + ': ' : '') + row.operator.reason +
      (row.operator.for ? ' (for ' + row.operator.for + ')' : '') + (row.forced_at ? ' · ' + time(row.forced_at) : ''));
  }
  t.append(dl);
  if (ui.info && !ui.info.read_only) {
    const b = el('div', 'buttons');
    const button = (op, label) => {
      const x = el('button', op, label);
      x.type = 'button';
      x.addEventListener('click', () => openAction(op, row));
      b.append(x);
    };
    button('isolate', 'Isolate');
    if (row.state !== 'closed') button('release', 'Release');
    if (row.state !== 'disabled') button('disable', 'Disable');
    if (row.state === 'disabled') button('enable', 'Enable');
    t.append(b);
  }
  updateClocks(t);
  return t;
}

function ratioView(row) {
  const v = el('div');
  const threshold = ui.info.failure_ratio;
  const over = row.calls >= ui.info.min_calls && row.failure_ratio >= threshold;
  let text = (row.calls === 0 ? 'no calls' : pct(row.failure_ratio) + ' failed') + ' · trips at ≥ ' + pct(threshold);
  if (row.calls > 0 && row.calls < ui.info.min_calls) text += ' once ' + ui.info.min_calls + ' calls';
  v.append(el('span', null, text));
  const m = el('div', 'meter');
  const fill = el('div', 'fill' + (over ? ' over' : ''));
  fill.style.width = Math.min(100, row.failure_ratio * 100) + '%';
  const mark = el('div', 'mark');
  mark.style.left = (threshold * 100) + '%';
  m.append(fill, mark);
  v.append(m);
  return v;
}

function count(n, what) { return n + ' ' + what + (n === 1 ? '' : 's'); }

function pct(r) { return Math.round(r * 1000) / 10 + '%'; }

function time(iso) {
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}

function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
}

function updateClocks(root) {
  const now = Date.now() + ui.offset;
  for (const c of root.querySelectorAll('.countdown')) {
    const left = Number(c.dataset.until) - now;
    c.textContent = left > 0 ? 'in ' + span(left) : 'ended';
  }
  for (const a of root.querySelectorAll('.ago')) {
    a.textContent = span(now - Number(a.dataset.at)) + ' ago';
  }
}

function tickClocks() { updateClocks($('tiles')); }

function transitionText(t) {
  return time(t.at) + ' ' + t.scope + ' ' + t.from + ' → ' + t.to + ' gen ' + t.generation + ': ' + t.reason;
}

function actionText(a) {
  const head = time(a.at) + ' ' + a.by + ' on this dashboard: ' + a.op + ' ' + a.scope + ': ';
  if (a.error) return head + 'failed: ' + a.error;
  return head + a.line + ' · ' + a.replicas;
}

function logLine(text, cls) {
  const list = $('activity');
  list.prepend(el('li', cls, text));
  while (list.children.length > 100) list.lastChild.remove();
}

function notice(text, cls) {
  const n = $('notice');
  n.className = 'notice ' + cls;
  n.textContent = text;
  n.hidden = false;
}

function openAction(op, row) {
  ui.acting = { op, row };
  const title = op.charAt(0).toUpperCase() + op.slice(1);
  $('act-title').textContent = title + ' this breaker for the whole fleet';
  $('act-scope').textContent = row.scope;
  $('act-submit').textContent = title;
  $('act-reason').value = '';
  $('act-for').value = '';
  $('act-for-label').hidden = op !== 'isolate';
  $('act-by').value = localStorage.getItem('cbctl.by') || '';
  $('act-error').textContent = '';
  $('act').showModal();
  $('act-reason').focus();
}

$('act-cancel').addEventListener('click', () => $('act').close());

$('act-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const { op, row } = ui.acting;
  const reason = $('act-reason').value.trim();
  if (!reason) { $('act-error').textContent = 'Give a reason: it goes with the change, for whoever looks next.'; return; }
  const by = $('act-by').value.trim();
  localStorage.setItem('cbctl.by', by);
  $('act-submit').disabled = true;
  try {
    const a = await post('/api/' + op, { scope: row.scope, reason, by, for: op === 'isolate' ? $('act-for').value.trim() : '' });
    $('act').close();
    notice(a.line + ' · ' + a.replicas, a.durable);
  } catch (e) {
    $('act-error').textContent = e.message;
  } finally {
    $('act-submit').disabled = false;
  }
});

let filterTimer = null;
$('filter').addEventListener('input', () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => { ui.q = $('filter').value; ui.page = 1; load(); }, 200);
});
$('sort').addEventListener('change', () => { ui.sort = $('sort').value; ui.page = 1; load(); });
$('prev').addEventListener('click', () => { ui.page = Math.max(1, ui.page - 1); load(); });
$('next').addEventListener('click', () => { ui.page += 1; load(); });

start();
