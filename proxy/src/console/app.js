// sluice approvals console: talks to the admin API that served this page (same origin),
// with the bearer token the operator pastes once (kept in sessionStorage: this tab only).
// Every value shown comes from the API and partly from agents (URLs, identities), so it
// is only ever set as textContent, never parsed as HTML.
'use strict';

(function () {
  const TOKEN_KEY = 'sluice-admin-token';
  const BY_KEY = 'sluice-admin-by';
  const REFRESH_MS = 1000;

  const $ = (id) => document.getElementById(id);
  let timer = null;
  let busy = false;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function age(ms) {
    if (typeof ms !== 'number' || ms < 0) return '-';
    if (ms < 1000) return ms + 'ms';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    return Math.floor(s / 3600) + 'h' + String(Math.floor(s / 60) % 60).padStart(2, '0') + 'm';
  }

  function bytes(n) {
    if (typeof n !== 'number' || n < 0) return '-';
    if (n < 1024) return n + ' B';
    const units = ['KiB', 'MiB', 'GiB', 'TiB'];
    let v = n, u = -1;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return v.toFixed(1) + ' ' + units[u];
  }

  function identityName(id) {
    return (typeof id === 'string' && id !== '') ? id : '(unresolved)';
  }

  // ---------------------------------------------------------------- API

  class unauthorized extends Error {}

  async function api(method, path, body) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new unauthorized('no token');
    const init = {
      method,
      headers: { 'Authorization': 'Bearer ' + token, 'Accept': 'application/json' },
      cache: 'no-store',
      credentials: 'omit',
    };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    let data = null;
    try { data = await res.json(); } catch (_) { data = null; }
    if (res.status === 401) throw new unauthorized('the admin API refused the token');
    if (!res.ok) {
      const reason = data && typeof data.reason === 'string' ? data.reason : 'error';
      const msg = data && typeof data.message === 'string' ? ': ' + data.message : '';
      throw new Error('HTTP ' + res.status + ' ' + reason + msg);
    }
    return data;
  }

  function say(text, isError) {
    const m = $('message');
    m.textContent = text;
    m.className = isError ? 'message error' : 'message';
    m.hidden = !text;
  }

  function showLogin(error) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (timer) { clearTimeout(timer); timer = null; }
    $('main').hidden = true;
    $('forget').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = error || '';
    $('status').textContent = '';
    $('token').value = '';
    $('token').focus();
  }

  async function act(label, method, path, body) {
    try {
      const r = await api(method, path, body);
      say(label(r), false);
    } catch (e) {
      if (e instanceof unauthorized) return showLogin('The token was refused. Paste it again.');
      say(e.message, true);
    }
    refresh();
  }

  // ---------------------------------------------------------------- approvals

  // Cards are kept by approval id across refreshes so a reason being typed survives.
  const cards = new Map();

  function approvalCard(a) {
    const reason = el('input', { type: 'text', placeholder: 'reason (optional)', maxLength: 200,
                                 className: 'reason', 'data-role': 'reason' });
    const decide = (verb) => () => {
      const by = sessionStorage.getItem(BY_KEY) || 'console';
      act((r) => (r.decision || verb) + ' ' + r.id + ' by ' + r.by, 'POST',
          '/v1/approvals/' + encodeURIComponent(a.id) + '/' + verb,
          { by, reason: reason.value });
    };
    const approve = el('button', { type: 'button', className: 'approve', 'data-role': 'approve' }, 'Approve');
    const deny = el('button', { type: 'button', className: 'danger', 'data-role': 'deny' }, 'Deny');
    approve.addEventListener('click', decide('approve'));
    deny.addEventListener('click', decide('deny'));

    const findings = el('tbody');
    for (const f of Array.isArray(a.findings) ? a.findings : []) {
      findings.append(el('tr', {},
        el('td', { className: 'mono' }, f.rule),
        el('td', { className: 'mono' }, f.location),
        el('td', { className: 'mono' }, f.variant || '-'),
        el('td', { className: 'num' }, f.offset),
        el('td', { className: 'mono' }, f.fingerprint)));
    }
    const findingsTable = findings.children.length
      ? el('table', { className: 'findings' },
           el('thead', {}, el('tr', {}, el('th', {}, 'rule'), el('th', {}, 'location'),
                                   el('th', {}, 'variant'), el('th', {}, 'offset'),
                                   el('th', {}, 'fingerprint'))),
           findings)
      : el('p', { className: 'empty' }, 'No DLP finding: held by a supervise rule.');

    const ageEl = el('span', { 'data-role': 'age' });
    const expiresEl = el('span', { 'data-role': 'expires' });
    const card = el('article', { className: 'approval', 'data-approval-id': a.id },
      el('div', { className: 'request' },
         el('span', { className: 'method' }, a.method),
         el('span', { className: 'url mono' }, a.url)),
      el('div', { className: 'meta' },
         el('span', {}, 'identity ', el('b', { 'data-role': 'identity' }, identityName(a.identity))),
         el('span', {}, 'from ', el('span', { className: 'mono' }, a.source)),
         el('span', {}, 'reason ', el('b', {}, a.reason)),
         el('span', {}, 'waiting ', ageEl),
         el('span', {}, 'expires in ', expiresEl),
         el('span', { className: 'mono faint' }, a.id)),
      findingsTable,
      el('div', { className: 'actions' }, reason, approve, deny));
    card._age = ageEl;
    card._expires = expiresEl;
    return card;
  }

  function renderApprovals(list) {
    const box = $('approvals');
    const seen = new Set();
    list.sort((x, y) => (x.expires_in_ms || 0) - (y.expires_in_ms || 0));
    for (const a of list) {
      if (typeof a.id !== 'string') continue;
      seen.add(a.id);
      let card = cards.get(a.id);
      if (!card) {
        card = approvalCard(a);
        cards.set(a.id, card);
      }
      card._age.textContent = age(a.age_ms);
      card._expires.textContent = age(a.expires_in_ms);
      box.append(card); // moves it into sorted order; focus and input are kept
    }
    for (const [id, card] of cards) {
      if (!seen.has(id)) { card.remove(); cards.delete(id); }
    }
    $('approvals-count').textContent = '(' + seen.size + ')';
    $('approvals-empty').hidden = seen.size > 0;
  }

  // ---------------------------------------------------------------- flows

  const groups = new Map();

  function identityGroup(name, key) {
    const state = el('span', { className: 'badge', 'data-role': 'state' });
    const count = el('span', { className: 'count', 'data-role': 'count' });
    const kill = el('button', { type: 'button', className: 'danger', 'data-role': 'kill' }, 'Kill');
    const revive = el('button', { type: 'button', 'data-role': 'revive' }, 'Revive');
    kill.addEventListener('click', () => act(
      (r) => 'killed ' + r.killed + ': ' + r.closed + ' flow(s) closed' +
             (r.persisted === false ? ' (NOT saved: a restart would lift it)' : ''),
      'POST', '/v1/kill', { identity: key }));
    revive.addEventListener('click', () => act(
      (r) => 'revived ' + r.revived, 'POST', '/v1/revive', { identity: key }));
    const rows = el('tbody');
    const table = el('table', { className: 'flows' },
      el('thead', {}, el('tr', {}, el('th', {}, 'flow'), el('th', {}, 'kind'),
                              el('th', {}, 'source'), el('th', {}, 'destination'),
                              el('th', { className: 'num' }, 'age'), el('th', { className: 'num' }, 'up'),
                              el('th', { className: 'num' }, 'down'))),
      rows);
    const g = el('article', { className: 'identity', 'data-identity': name },
      el('div', { className: 'identity-head' },
         el('h3', {}, name), count, state, el('span', { className: 'spacer' }),
         kill, revive),
      table);
    g._rows = rows; g._state = state; g._count = count; g._kill = kill; g._revive = revive;
    g._table = table;
    return g;
  }

  function renderFlows(data) {
    const flows = Array.isArray(data.flows) ? data.flows : [];
    const killed = data.killed || {};
    const killedAll = killed.all === true;
    const killedIds = new Set(Array.isArray(killed.identities) ? killed.identities : []);
    const byIdentity = new Map();
    for (const f of flows) {
      const name = identityName(f.identity);
      if (!byIdentity.has(name)) byIdentity.set(name, { key: f.identity, flows: [] });
      byIdentity.get(name).flows.push(f);
    }
    // Killed identities stay visible (with their Revive button) when they have no flow.
    for (const id of killedIds) {
      if (typeof id === 'string' && !byIdentity.has(identityName(id)))
        byIdentity.set(identityName(id), { key: id, flows: [] });
    }
    const box = $('identities');
    const names = [...byIdentity.keys()].sort();
    for (const name of names) {
      const { key, flows: fs } = byIdentity.get(name);
      let g = groups.get(name);
      if (!g) { g = identityGroup(name, key); groups.set(name, g); }
      const isKilled = killedAll || killedIds.has(key);
      g._state.textContent = isKilled ? 'killed' : 'live';
      g._state.className = isKilled ? 'badge killed' : 'badge live';
      g._count.textContent = fs.length + (fs.length === 1 ? ' flow' : ' flows');
      // Without a name there is nothing to kill by identity (use Kill all).
      g._kill.hidden = typeof key !== 'string' || key === '' || isKilled;
      g._revive.hidden = typeof key !== 'string' || key === '' || !killedIds.has(key);
      fs.sort((x, y) => (y.age_ms || 0) - (x.age_ms || 0));
      const rows = fs.map((f) => el('tr', { 'data-flow': String(f.flow) },
        el('td', { className: 'mono' }, f.flow),
        el('td', {}, f.kind),
        el('td', { className: 'mono' }, f.source),
        el('td', { className: 'mono' }, f.destination),
        el('td', { className: 'num' }, age(f.age_ms)),
        el('td', { className: 'num' }, bytes(f.bytes_up)),
        el('td', { className: 'num' }, bytes(f.bytes_down))));
      g._rows.replaceChildren(...rows);
      g._table.hidden = rows.length === 0;
      box.append(g);
    }
    for (const [name, g] of groups) {
      if (!byIdentity.has(name)) { g.remove(); groups.delete(name); }
    }
    const ks = $('killswitch');
    if (killedAll) { ks.textContent = 'kill switch: ALL identities killed'; ks.className = 'badge killed'; }
    else if (killedIds.size) { ks.textContent = 'kill switch on for ' + killedIds.size + ' identit' + (killedIds.size === 1 ? 'y' : 'ies'); ks.className = 'badge killed'; }
    else { ks.textContent = 'kill switch off'; ks.className = 'badge live'; }
    $('kill-all').hidden = killedAll;
    $('revive-all').hidden = !killedAll && killedIds.size === 0;
    $('flows-count').textContent = '(' + flows.length + ')';
    $('flows-empty').hidden = flows.length > 0 || byIdentity.size > 0;
  }

  // ---------------------------------------------------------------- refresh loop

  async function refresh() {
    if (busy) return;
    busy = true;
    if (timer) { clearTimeout(timer); timer = null; }
    try {
      const [approvals, flows] = await Promise.all([api('GET', '/v1/approvals'), api('GET', '/v1/flows')]);
      renderApprovals(Array.isArray(approvals.approvals) ? approvals.approvals : []);
      renderFlows(flows || {});
      $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
      $('status').className = 'status';
    } catch (e) {
      busy = false;
      if (e instanceof unauthorized) return showLogin('The token was refused. Paste it again.');
      $('status').textContent = 'admin API unreachable (' + e.message + '); retrying';
      $('status').className = 'status error';
    }
    busy = false;
    if (sessionStorage.getItem(TOKEN_KEY)) timer = setTimeout(refresh, REFRESH_MS);
  }

  function start() {
    $('login').hidden = true;
    $('main').hidden = false;
    $('forget').hidden = false;
    refresh();
  }

  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const token = $('token').value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    const by = $('by').value.trim();
    if (by) sessionStorage.setItem(BY_KEY, by);
    $('token').value = '';
    start();
  });
  $('forget').addEventListener('click', () => showLogin(''));
  $('kill-all').addEventListener('click', () => {
    if (!window.confirm('Kill every identity? All live flows are closed and new ones get 503 until revived.')) return;
    act((r) => 'killed all: ' + r.closed + ' flow(s) closed' +
              (r.persisted === false ? ' (NOT saved: a restart would lift it)' : ''),
        'POST', '/v1/kill', { all: true });
  });
  $('revive-all').addEventListener('click', () => act(
    (r) => 'revived ' + r.revived, 'POST', '/v1/revive', { all: true }));

  if (sessionStorage.getItem(TOKEN_KEY)) start(); else showLogin('');
})();
