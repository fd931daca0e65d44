// The merchant portal (docs/operations.md §9): one tenant's webhooks, their deliveries and health,
// over the daemon's own REST API with the portal session's cookie (credentials: 'same-origin') and
// its CSRF token on every write. Served under a strict CSP (no inline script or style, no eval).
//
// Invariant: every value that comes from a receiver, a producer or the server (URLs, event
// types, payloads, response bodies, error messages) reaches the page through textContent or
// attributes set by createElement helpers, never through innerHTML; a response body of
// "<script>…" stays text.
'use strict';

(() => {
  // ---------------------------------------------------------------------------------------
  // State

  const state = {
    session: null, // {tenant, scope, expires_at, csrf_token}
    endpoints: [], // as GET .../endpoints answers
    deliveries: [], // normalized {delivery, attempts|null, event|null}
    ordering: new Map(), // endpoint id -> keys as GET .../endpoints/{id}/ordering answers (SPEC R13)
    busy: new Set(), // endpoint ids with an action running
    expiryTimer: 0,
  };

  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------------------------------
  // DOM helpers (text only)

  // h('div', {class: 'x', dataset: {testid: 'y'}, text: 'z'}, child, 'text', ...)
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = String(v);
        else if (k === 'dataset') Object.assign(el.dataset, v);
        else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
        else if (k === 'hidden') el.hidden = Boolean(v);
        else if (k === 'disabled') el.disabled = Boolean(v);
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      if (Array.isArray(c)) append(el, c);
      else if (c instanceof Node) el.appendChild(c);
      else el.appendChild(document.createTextNode(String(c)));
    }
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = String(v);
      else el.setAttribute(k, String(v));
    }
    for (const c of children) if (c) el.appendChild(c);
    return el;
  }

  function button(label, opts = {}) {
    return h('button', {
      type: 'button',
      class: `btn ${opts.kind || ''} ${opts.size || ''}`.trim(),
      dataset: opts.dataset,
      'aria-label': opts.ariaLabel,
      disabled: opts.disabled,
      on: opts.onClick ? { click: opts.onClick } : undefined,
      text: label,
    });
  }

  // ---------------------------------------------------------------------------------------
  // Formatting

  const dateTime = new Intl.DateTimeFormat(undefined, {
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  });
  const timeOnly = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });

  function fmtTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : dateTime.format(d);
  }

  function timeEl(iso) {
    return h('time', { datetime: iso || undefined, title: iso || undefined, text: fmtTime(iso) });
  }

  function fmtMs(ms) {
    if (typeof ms !== 'number' || !Number.isFinite(ms)) return '—';
    if (ms === 0) return '0 ms';
    if (ms < 1) return `${ms.toFixed(2)} ms`;
    if (ms < 1000) return `${Math.round(ms)} ms`;
    return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  }

  // An age in seconds (head_age_seconds, docs/operations.md "Ordered delivery"): as fmtMs under a
  // minute, then in minutes, hours and days.
  function fmtSeconds(sec) {
    if (typeof sec !== 'number' || !Number.isFinite(sec) || sec < 0) return '—';
    if (sec < 60) return fmtMs(sec * 1000);
    const min = Math.floor(sec / 60);
    if (min < 60) return `${min} min`;
    const hours = Math.floor(min / 60);
    if (hours < 48) return `${hours} h ${min % 60} min`;
    return `${Math.floor(hours / 24)} d ${hours % 24} h`;
  }

  function humanize(word) {
    return String(word || '').replace(/_/g, ' ');
  }

  const STATUS_BADGE = {
    delivered: 'badge-ok',
    pending: 'badge-info',
    in_flight: 'badge-info',
    failed: 'badge-bad',
    dead: 'badge-bad',
    unknown: 'badge-warn',
    superseded: 'badge-plain', // SPEC R13.3: a newer delivery of its ordering key replaced it
  };
  const ENDPOINT_BADGE = { enabled: 'badge-ok', paused: 'badge-warn', disabled: 'badge-bad' };
  const TERMINAL = new Set(['delivered', 'failed', 'dead', 'unknown', 'superseded']);

  function statusBadge(status, extra) {
    return h('span', {
      class: `badge ${STATUS_BADGE[status] || ''}`,
      dataset: { status },
      text: humanize(status) + (extra ? ` · ${extra}` : ''),
    });
  }

  // A response cell: "200", "410 · gone", "timeout", "—".
  function responseText(d) {
    const parts = [];
    if (d.last_http_status) parts.push(String(d.last_http_status));
    if (d.last_code && d.last_code !== `http_${d.last_http_status}`) parts.push(d.last_code);
    return parts.length ? parts.join(' · ') : '—';
  }

  // SPEC R6 codes an endpoint can be disabled for, in a merchant's words (R8.1: a 410, or a
  // delivery that used up every attempt; the code is the last error).
  function reasonSentence(code) {
    if (!code) return 'ringcast stopped sending to this endpoint after its deliveries kept failing.';
    if (code === 'gone') {
      return 'Your server answered 410 Gone, which means "this endpoint no longer exists", so it was disabled at once.';
    }
    let m = /^http_(\d{3})$/.exec(code);
    if (m) {
      const st = Number(m[1]);
      const what =
        st === 429 ? 'kept asking to slow down (429 Too Many Requests)'
        : st >= 500 ? `kept failing with a server error (HTTP ${st})`
        : `kept refusing the requests (HTTP ${st})`;
      return `A delivery used up all its retries: your server ${what}.`;
    }
    if (code === 'timeout') {
      return 'A delivery used up all its retries: your server did not answer within the time limit (15 s).';
    }
    if (code === 'redirect_not_allowed') {
      return 'A delivery used up all its retries: your server answered with a redirect, and redirects are never followed. Use the final URL.';
    }
    if (code === 'dns_failed') {
      return "A delivery used up all its retries: the endpoint's host name could not be resolved.";
    }
    if (code === 'private_address') {
      return "The endpoint's host resolves to a private or reserved address; nothing is sent there.";
    }
    if (code === 'network_tls_cert') {
      return "A delivery used up all its retries: your server's TLS certificate was not accepted (expired, self-signed or for another name).";
    }
    if (code === 'network_tls_handshake') {
      return 'A delivery used up all its retries: the TLS handshake with your server failed.';
    }
    m = /^network_(\w+)$/.exec(code);
    if (m) {
      return `A delivery used up all its retries: your server could not be reached (network error ${m[1]}).`;
    }
    if (['not_https', 'port_not_allowed', 'userinfo_not_allowed', 'fragment_not_allowed',
      'invalid_url', 'url_too_long', 'url_too_short'].includes(code)) {
      return `The endpoint URL is not accepted (${humanize(code)}); nothing is sent to it. Edit the URL.`;
    }
    return `A delivery used up all its retries (last error: ${code}).`;
  }

  // ---------------------------------------------------------------------------------------
  // API

  class ApiError extends Error {
    constructor(status, error) {
      super((error && error.message) || `HTTP ${status}`);
      this.status = status;
      this.code = (error && error.code) || `http_${status}`;
      this.field = (error && error.field) || '';
    }
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // One JSON call. GETs are retried on 503 (a cluster moving partitions, a full read queue).
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const init = { method, credentials: 'same-origin', headers, cache: 'no-store' };
    if (method !== 'GET' && state.session) headers['X-CSRF-Token'] = state.session.csrf_token;
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    for (let attempt = 0; ; attempt++) {
      let r;
      try {
        r = await fetch(path, init);
      } catch (e) {
        if (method === 'GET' && attempt < 4) {
          await sleep(300 * (attempt + 1));
          continue;
        }
        throw new ApiError(0, { code: 'network', message: 'The server could not be reached.' });
      }
      const text = await r.text();
      let data = null;
      if (text) {
        try {
          data = JSON.parse(text);
        } catch (_) {
          data = null;
        }
      }
      if (r.ok) return { data, text, status: r.status };
      if (r.status === 503 && method === 'GET' && attempt < 6) {
        await sleep(250 * (attempt + 1));
        continue;
      }
      const err = new ApiError(r.status, data && data.error);
      if (r.status === 401 && state.session) showAuthError(err.code, err.message);
      throw err;
    }
  }

  const tenantPath = () => `/v1/tenants/${encodeURIComponent(state.session.tenant)}`;
  const canManage = () => state.session && state.session.scope === 'manage';

  // ---------------------------------------------------------------------------------------
  // Session

  const AUTH_TEXT = {
    link_expired: ['This link has expired',
      'Portal links work for a short time only. Go back to the platform that sent you here and open your webhook settings again to get a new link.'],
    link_invalid: ['This link is not valid',
      'The link is incomplete or was changed. Go back to the platform that sent you here and open your webhook settings again to get a new link.'],
    session_expired: ['Your session has ended',
      'For your security, portal sessions end after a while. Go back to the platform that sent you here and open your webhook settings again.'],
    no_session: ['No active session',
      'Open this page from the platform that manages your webhooks: it gives you a personal link.'],
    // The link opened a session but the next call came without its cookie: the browser keeps
    // cookies from a page embedded in another site (an iframe) to itself.
    cookie_blocked: ['Your browser blocked this page\'s session',
      'This page is shown inside another site, and your browser does not let it keep its session cookie there. Open it in a tab of its own instead.'],
  };

  let linkToken = ''; // the link this page was opened with (kept in memory only)

  function showAuthError(code, message) {
    const embedded = window.self !== window.top;
    if (code === 'unauthorized' && embedded && linkToken) code = 'cookie_blocked';
    const [title, text] = AUTH_TEXT[code] ||
      ['This page cannot be shown', 'Go back to the platform that sent you here and open your webhook settings again.'];
    state.session = null;
    clearTimeout(state.expiryTimer);
    for (const d of document.querySelectorAll('dialog[open]')) d.close();
    $('loading').hidden = true;
    $('app').hidden = true;
    $('session-info').hidden = true;
    $('auth-error-title').textContent = title;
    $('auth-error-message').textContent = text;
    $('auth-error-code').textContent = code ? `Reason: ${code}${message ? ` — ${message}` : ''}` : '';
    const box = $('auth-error');
    const old = box.querySelector('[data-action="open-tab"]');
    if (old) old.remove();
    if (code === 'cookie_blocked') {
      const token = linkToken;
      const open = button('Open in a new tab', { kind: 'btn-primary', dataset: { action: 'open-tab' } });
      open.addEventListener('click', () => {
        window.open(`${location.origin}/portal/#link=${encodeURIComponent(token)}`, '_blank', 'noopener');
      });
      $('auth-error-code').after(open);
    }
    box.dataset.code = code || '';
    box.hidden = false;
    document.title = `${title} · Webhooks`;
  }

  async function startSession() {
    const m = /(?:^#|&)link=([^&]+)/.exec(location.hash);
    try {
      let res;
      if (m) {
        const token = decodeURIComponent(m[1]);
        linkToken = token;
        // The token leaves the address bar (and the history) whether it works or not.
        history.replaceState(null, '', location.pathname + location.search);
        res = await api('POST', '/portal/session', { link: token });
      } else {
        res = await api('GET', '/portal/session');
      }
      return res.data;
    } catch (e) {
      const code = e instanceof ApiError && e.status === 401 ? e.code : '';
      if (code) showAuthError(code, e.message);
      else showAuthError(e.code || 'error', e.message);
      return null;
    }
  }

  function showSession() {
    const sess = state.session;
    $('tenant-name').textContent = sess.tenant;
    const scope = $('scope-badge');
    scope.textContent = sess.scope === 'manage' ? 'Manage' : 'View only';
    scope.className = `badge badge-plain ${sess.scope === 'manage' ? 'badge-info' : ''}`;
    $('view-only-note').hidden = canManage();
    const exp = new Date(sess.expires_at);
    if (!Number.isNaN(exp.getTime())) {
      $('session-expiry').textContent = `Session until ${timeOnly.format(exp)}`;
      const left = exp.getTime() - Date.now();
      clearTimeout(state.expiryTimer);
      if (left > 0 && left < 2 ** 31) {
        state.expiryTimer = setTimeout(() => showAuthError('session_expired', ''), left + 500);
      }
    }
    $('session-info').hidden = false;
    document.title = `Webhooks · ${sess.tenant}`;
  }

  // ---------------------------------------------------------------------------------------
  // Endpoints

  async function loadEndpoints() {
    const { data } = await api('GET', `${tenantPath()}/endpoints`);
    state.endpoints = (data && data.endpoints) || [];
    renderEndpoints();
    renderEndpointFilter();
    loadOrdering(); // the cards are shown first; their held keys follow
  }

  // SPEC R13: the keys of each ordered endpoint that are held or have deliveries waiting
  // (docs/operations.md "Ordered delivery"). A failed request shows nothing extra on the card.
  const ORDER_KEYS_LIMIT = 20;
  const isOrdered = (ep) => Boolean(ep && ep.ordering && ep.ordering !== 'none');
  let orderingSeq = 0;

  async function loadOrdering() {
    const seq = ++orderingSeq;
    const ordered = state.endpoints.filter(isOrdered);
    for (const id of [...state.ordering.keys()]) {
      if (!ordered.some((ep) => ep.id === id)) state.ordering.delete(id);
    }
    await Promise.all(ordered.map(async (ep) => {
      let keys = null;
      try {
        const { data } = await api('GET',
          `${tenantPath()}/endpoints/${encodeURIComponent(ep.id)}/ordering?limit=${ORDER_KEYS_LIMIT}`);
        if (data && Array.isArray(data.keys)) keys = data.keys;
      } catch (_) {
        keys = null;
      }
      if (seq !== orderingSeq) return;
      if (keys) state.ordering.set(ep.id, keys);
      else state.ordering.delete(ep.id);
      renderOrderingFacts(ep.id);
    }));
  }

  // The card's "Held keys" and "Backlogged keys" facts, redrawn in place after the Ordering fact.
  function renderOrderingFacts(id) {
    const card = cardOf(id);
    const ep = endpointById(id);
    if (!card || !ep) return;
    for (const el of card.querySelectorAll('[data-order-fact]')) el.remove();
    const anchor = card.querySelector('[data-testid="endpoint-ordering"]');
    const dd = anchor && anchor.closest('dd');
    if (dd) dd.after(...orderingFacts(ep));
  }

  // dt/dd pairs for the facts list; none while the keys are not known.
  function orderingFacts(ep) {
    const keys = isOrdered(ep) ? state.ordering.get(ep.id) : null;
    if (!keys) return [];
    const more = keys.length >= ORDER_KEYS_LIMIT ? '+' : ''; // the list stopped at the limit
    const held = keys.filter((k) => k.blocked);
    const backlog = keys.filter((k) => !k.blocked && k.waiting > 0);
    const pair = (label, value) => [
      h('dt', { dataset: { orderFact: '' }, text: label }),
      h('dd', { dataset: { orderFact: '' } }, value)];

    const heldView = held.length
      ? h('div', { dataset: { testid: 'endpoint-held-keys' } },
        h('strong', { text: `${held.length}${more} held` }),
        h('ul', { class: 'held-keys' }, held.slice(0, 5).map(heldKeyLine)),
        held.length > 5 ? h('span', { class: 'muted', text: `and ${held.length - 5} more` }) : null)
      : h('span', { class: 'muted', dataset: { testid: 'endpoint-held-keys' }, text: 'None' });

    const ages = backlog.map((k) => k.head_age_seconds).filter((a) => typeof a === 'number');
    const oldest = ages.length ? ` · oldest head ${fmtSeconds(Math.max(...ages))}` : '';
    const backlogView = backlog.length
      ? h('span', { dataset: { testid: 'endpoint-backlog-keys' }, text: `${backlog.length}${more}${oldest}` })
      : h('span', { class: 'muted', dataset: { testid: 'endpoint-backlog-keys' }, text: 'None' });

    return [...pair('Held keys', heldView), ...pair('Backlogged keys', backlogView)];
  }

  // One held key: the failed head that holds it (resend or resolve it from its detail), how many
  // wait behind it and since when. blocked_by is null after a restart: its first waiting one.
  function heldKeyLine(k) {
    const open = (id, label) => h('button', {
      type: 'button',
      class: 'btn-link mono',
      dataset: { action: 'open-held', deliveryId: id },
      'aria-label': `${label} ${id}: show attempts`,
      text: id,
      on: { click: () => openDelivery(id) },
    });
    const age = typeof k.head_age_seconds === 'number' ? ` · held ${fmtSeconds(k.head_age_seconds)}` : '';
    return h('li', { title: `Ordering key hash ${k.order_key}` },
      k.blocked_by
        ? open(k.blocked_by, 'Failed delivery holding this key')
        : [h('span', { class: 'muted', text: 'failed delivery not known since a restart; first waiting ' }),
          k.first_waiting ? open(k.first_waiting, 'First delivery waiting on this key') : null],
      ` · ${k.waiting} waiting${age}`);
  }

  function endpointById(id) {
    return state.endpoints.find((e) => e.id === id);
  }

  function replaceEndpoint(ep) {
    const i = state.endpoints.findIndex((e) => e.id === ep.id);
    if (i < 0) return;
    state.endpoints[i] = Object.assign({}, state.endpoints[i], ep);
    const card = cardOf(ep.id);
    if (card) {
      const focusedAction = document.activeElement && card.contains(document.activeElement)
        ? document.activeElement.dataset.action : null;
      const result = card.querySelector('[data-testid="card-result"]');
      const fresh = endpointCard(state.endpoints[i]);
      if (result) fresh.querySelector('[data-testid="card-result"]').replaceWith(result);
      card.replaceWith(fresh);
      if (focusedAction) {
        const again = fresh.querySelector(`[data-action="${focusedAction}"]`) ||
          fresh.querySelector('.card-actions button');
        if (again) again.focus();
      }
    }
    renderEndpointFilter();
  }

  function renderEndpoints() {
    const list = $('endpoints');
    clear(list);
    const n = state.endpoints.length;
    $('endpoints-count').textContent = n === 1 ? '1 endpoint' : `${n} endpoints`;
    if (!n) {
      list.appendChild(h('p', { class: 'empty', text: 'No endpoints yet. Your platform adds them for you.' }));
      return;
    }
    for (const ep of state.endpoints) list.appendChild(endpointCard(ep));
  }

  function endpointCard(ep) {
    const card = h('article', {
      class: `card card-${ep.state}`,
      dataset: { testid: 'endpoint-card', endpointId: ep.id, state: ep.state },
      'aria-labelledby': `ep-url-${ep.id}`,
    });
    const title = h('div', { class: 'card-title' },
      h('h3', { class: 'card-url', id: `ep-url-${ep.id}`, dataset: { testid: 'endpoint-url' }, text: ep.url }),
      typeof ep.description === 'string' && ep.description
        ? h('p', { class: 'card-description', dataset: { testid: 'endpoint-description' }, text: ep.description })
        : null);
    card.appendChild(h('div', { class: 'card-head' }, title,
      h('span', {
        class: `badge ${ENDPOINT_BADGE[ep.state] || ''}`,
        dataset: { testid: 'endpoint-state' },
        text: humanize(ep.state),
      })));

    if (ep.state === 'disabled') card.appendChild(disabledBanner(ep));

    const types = ep.event_types && ep.event_types.length
      ? h('span', { class: 'chips' }, ep.event_types.map((t) => h('span', { class: 'chip', text: t })))
      : h('span', { class: 'muted', text: 'All events' });
    const rl = ep.rate_limit || {};
    const rate = rl.per_second > 0
      ? `${rl.per_second}/s${rl.burst ? `, burst ${rl.burst}` : ''}` : 'No limit';
    const facts = h('dl', { class: 'facts' });
    const fact = (k, v) => facts.append(h('dt', { text: k }), h('dd', {}, v));
    fact('Event types', types);
    fact('Retry policy', h('span', { class: 'mono', text: ep.policy }));
    fact('Signature', humanize(ep.signature));
    fact('Rate limit', rate);
    if (ep.max_in_flight) fact('In flight', `at most ${ep.max_in_flight}`);
    // SPEC R13: ordered delivery; what a failed head does and supersede only matter when ordered.
    if (isOrdered(ep)) {
      const how = [humanize(ep.ordering), `on head failure: ${ep.on_head_failure}`];
      if (ep.supersede) how.push('newest only after a backlog');
      fact('Ordering', h('span', { dataset: { testid: 'endpoint-ordering' }, text: how.join(' · ') }));
      facts.append(...orderingFacts(ep));
    } else {
      fact('Ordering', h('span', { class: 'muted', dataset: { testid: 'endpoint-ordering' }, text: 'None' }));
    }
    fact('Secrets', ep.secrets_active > 1 ? `${ep.secrets_active} active (rotation overlap)` : `${ep.secrets_active || 0} active`);
    fact('Updated', timeEl(ep.updated_at));
    card.appendChild(h('div', { class: 'card-body' }, facts));

    card.appendChild(h('div', {
      class: 'card-result',
      dataset: { testid: 'card-result' },
      role: 'status',
      'aria-live': 'polite',
    }));

    if (canManage()) {
      const busy = state.busy.has(ep.id);
      const actions = h('div', { class: 'card-actions', role: 'group', 'aria-label': `Actions for ${ep.url}` });
      const act = (label, action, fn, kind) => {
        const b = button(label, {
          kind: kind || '',
          size: 'btn-small',
          dataset: { action },
          disabled: busy,
          onClick: () => runCardAction(ep.id, fn),
        });
        actions.appendChild(b);
        return b;
      };
      if (ep.state === 'enabled') act('Pause', 'pause', (c) => endpointAction(ep.id, 'pause', c));
      if (ep.state === 'paused') act('Resume', 'resume', (c) => endpointAction(ep.id, 'resume', c), 'btn-primary');
      if (ep.state === 'disabled') act('Enable', 'enable', (c) => endpointAction(ep.id, 'enable', c), 'btn-primary');
      act('Send test', 'test', (c) => sendTest(ep.id, c));
      act('Edit', 'edit', () => openEdit(ep.id));
      act('Rotate secret', 'rotate', () => openRotate(ep.id));
      card.appendChild(actions);
    }
    return card;
  }

  function disabledBanner(ep) {
    const code = ep.disabled_reason || '';
    return h('div', { class: 'banner', dataset: { testid: 'disabled-banner', reason: code } },
      h('h3', {},
        'Disabled',
        code ? h('code', { dataset: { testid: 'disabled-reason' }, text: code }) : null),
      h('p', { text: reasonSentence(code) }),
      h('p', { text: 'To start receiving webhooks again:' }),
      h('ol', {},
        h('li', { text: 'Fix your server so that it answers this URL with a 2xx status.' }),
        h('li', { text: 'Choose "Send test" and check that the test is delivered (2xx).' }),
        h('li', { text: 'Choose "Enable". New events are delivered from then on.' }),
        h('li', {
          text: 'Deliveries that were waiting when it was disabled were stopped (endpoint_disabled) and are not sent by themselves: after enabling, resend them one by one, or open one of them and use "Recover since" to resend all failed ones since a time.',
        })));
  }

  const cardOf = (id) =>
    document.querySelector(`[data-testid="endpoint-card"][data-endpoint-id="${CSS.escape(id)}"]`);

  // The result line of an endpoint's card (looked up at each write: the card may be redrawn).
  function cardResult(id) {
    return {
      set(kind, content, extra = {}) {
        const card = cardOf(id);
        const live = card && card.querySelector('[data-testid="card-result"]');
        if (!live) return;
        clear(live);
        live.className = `card-result result-${kind}`;
        live.dataset.kind = kind;
        if (extra.deliveryId) live.dataset.deliveryId = extra.deliveryId;
        else delete live.dataset.deliveryId;
        append(live, [content]);
      },
    };
  }

  async function runCardAction(id, fn) {
    if (state.busy.has(id)) return;
    state.busy.add(id);
    setCardBusy(id, true);
    const out = cardResult(id);
    try {
      await fn(out);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      out.set('bad', errorText(e));
    } finally {
      state.busy.delete(id);
      setCardBusy(id, false);
    }
  }

  function setCardBusy(id, busy) {
    const card = cardOf(id);
    if (!card) return;
    card.setAttribute('aria-busy', busy ? 'true' : 'false');
    for (const b of card.querySelectorAll('.card-actions button')) b.disabled = busy;
  }

  function errorText(e) {
    if (!(e instanceof ApiError)) return `Something went wrong: ${e && e.message ? e.message : e}`;
    const field = e.field ? ` (${e.field})` : '';
    return `${e.message}${field} [${e.code}]`;
  }

  async function endpointAction(id, action, out) {
    const { data } = await api('POST', `${tenantPath()}/endpoints/${encodeURIComponent(id)}/${action}`);
    const done = { pause: 'Paused: new events are not queued for it until you resume.',
      resume: 'Resumed: deliveries go out again.',
      enable: 'Enabled: new events are delivered again.' }[action];
    if (data && data.id) replaceEndpoint(data);
    out.set('ok', done);
    $('endpoints-status').textContent = done;
    refreshHealth();
  }

  // R8.5 "send a test event, see 2xx": POST .../test, then follow the test delivery to its end.
  async function sendTest(id, out) {
    out.set('wait', 'Sending a test event…');
    const { data } = await api('POST', `${tenantPath()}/endpoints/${encodeURIComponent(id)}/test`);
    const did = data && data.delivery_id;
    if (!did) throw new Error('the server did not name the test delivery');
    out.set('wait', `Test sent (delivery ${did}); waiting for your server's answer…`);
    const deadline = Date.now() + 60000;
    let detail = null;
    while (Date.now() < deadline) {
      try {
        detail = (await api('GET', `${tenantPath()}/deliveries/${encodeURIComponent(did)}`)).data;
      } catch (e) {
        if (!(e instanceof ApiError) || e.status !== 404) throw e; // not readable yet
      }
      const d = detail && detail.delivery;
      if (d && TERMINAL.has(d.status)) break;
      if (d && d.attempts > 0) {
        out.set('wait', `Test delivery ${did}: attempt ${d.attempts} got ${responseText(d)}; retrying…`);
      }
      await sleep(400);
    }
    loadDeliveries();
    const d = detail && detail.delivery;
    if (!d || !TERMINAL.has(d.status)) {
      out.set('wait', `Test delivery ${did} is still running; see Recent deliveries.`);
      return;
    }
    const last = (detail.attempts || []).filter((a) => a.kind === 'attempt').pop();
    const took = last ? ` in ${fmtMs(last.duration_ms)}` : '';
    const details = h('button', {
      type: 'button',
      class: 'btn-link',
      text: 'Show details',
      on: { click: () => openDelivery(did) },
    });
    const text = d.status === 'delivered'
      ? `Test delivered: your server answered ${responseText(d)}${took}. `
      : `Test ${humanize(d.status)}: ${responseText(d)}${took}. `;
    out.set(d.status === 'delivered' ? 'ok' : 'bad', [text, details], { deliveryId: did });
  }

  // ---------------------------------------------------------------------------------------
  // Dialogs

  let lastFocus = null;

  function openDialog(dlg, focusEl) {
    lastFocus = document.activeElement;
    if (!dlg.open) dlg.showModal();
    const target = focusEl || dlg.querySelector('[autofocus]') || dlg.querySelector('input, textarea, select, button:not([data-close])') || dlg.querySelector('button');
    if (target) target.focus();
  }

  function wireDialogs() {
    for (const dlg of document.querySelectorAll('dialog')) {
      dlg.addEventListener('click', (e) => {
        const t = e.target;
        if (t === dlg) dlg.close(); // a click on the backdrop
        else if (t instanceof Element && t.closest('[data-close]')) dlg.close();
      });
      dlg.addEventListener('close', () => {
        if (dlg.id === 'secret-dialog') {
          clear($('secret-body')); // the new secret is shown once, never kept
          clear($('secret-foot'));
        }
        let back = lastFocus;
        lastFocus = null;
        if (back && !document.contains(back) && back.dataset && back.closest) {
          // The list was redrawn meanwhile: the same row's button, or the same card's action.
          const row = back.dataset.testid === 'delivery-open' && openedDelivery
            ? document.querySelector(`[data-testid="delivery-row"][data-delivery-id="${CSS.escape(openedDelivery)}"] [data-testid="delivery-open"]`)
            : null;
          back = row;
        }
        if (back && document.contains(back) && typeof back.focus === 'function') back.focus();
      });
    }
  }

  // --- edit ---

  let editing = null;

  function openEdit(id) {
    const ep = endpointById(id);
    if (!ep) return;
    editing = id;
    $('edit-url').value = ep.url;
    const hasDescription = Object.prototype.hasOwnProperty.call(ep, 'description');
    $('edit-description-field').hidden = !hasDescription;
    $('edit-description').value = hasDescription ? ep.description || '' : '';
    $('edit-event-types').value = (ep.event_types || []).join('\n');
    clearFormErrors();
    openDialog($('edit-dialog'), $('edit-url'));
  }

  function clearFormErrors() {
    for (const f of ['url', 'description', 'event-types']) {
      $(`edit-${f}-error`).textContent = '';
      $(`edit-${f}`).removeAttribute('aria-invalid');
    }
    $('edit-error').textContent = '';
  }

  const URL_CODES = new Set(['not_https', 'port_not_allowed', 'userinfo_not_allowed',
    'fragment_not_allowed', 'invalid_url', 'url_too_long', 'url_too_short', 'private_address']);

  async function submitEdit(e) {
    e.preventDefault();
    const ep = endpointById(editing);
    if (!ep) return;
    clearFormErrors();
    const patch = {};
    const url = $('edit-url').value.trim();
    if (url !== ep.url) patch.url = url;
    const types = $('edit-event-types').value.split(/[\s,]+/).map((t) => t.trim()).filter(Boolean);
    if (JSON.stringify(types) !== JSON.stringify(ep.event_types || [])) patch.event_types = types;
    if (!$('edit-description-field').hidden) {
      const desc = $('edit-description').value;
      if (desc !== (ep.description || '')) patch.description = desc;
    }
    if (!url) return fieldError('url', 'Enter the URL your server receives webhooks on.');
    if (!Object.keys(patch).length) {
      $('edit-dialog').close();
      return;
    }
    const save = $('edit-save');
    save.disabled = true;
    try {
      const { data } = await api('PATCH', `${tenantPath()}/endpoints/${encodeURIComponent(ep.id)}`, patch);
      $('edit-dialog').close();
      if (data && data.id) replaceEndpoint(data);
      cardResult(ep.id).set('ok', 'Changes saved.');
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return;
      let field = err.field || (URL_CODES.has(err.code) ? 'url' : '');
      field = field.split('.')[0];
      if (field === 'url' || field === 'event_types' || field === 'description') {
        fieldError(field, `${err.message} [${err.code}]`);
      } else {
        $('edit-error').textContent = errorText(err);
      }
    } finally {
      save.disabled = false;
    }
  }

  function fieldError(field, text) {
    const id = field === 'event_types' ? 'event-types' : field;
    $(`edit-${id}-error`).textContent = field === 'event_types' ? `Event types: ${text}` : `${field === 'url' ? 'URL' : 'Description'}: ${text}`;
    const input = $(`edit-${id}`);
    input.setAttribute('aria-invalid', 'true');
    input.focus();
  }

  // --- rotate secret ---

  function openRotate(id) {
    const ep = endpointById(id);
    if (!ep) return;
    const body = $('secret-body');
    const foot = $('secret-foot');
    clear(body);
    clear(foot);
    body.append(
      h('p', {}, 'A new signing secret is made for ', h('span', { class: 'mono', text: ep.url }), '.'),
      h('p', { class: 'callout', text: 'During the overlap period webhooks are signed with both the old and the new secret, so you can switch your server over without losing any.' }));
    const go = button('Rotate secret', { kind: 'btn-primary', dataset: { action: 'confirm-rotate' } });
    go.addEventListener('click', () => doRotate(ep, go));
    foot.append(button('Cancel', { kind: 'btn-ghost', dataset: { close: '' } }), go);
    openDialog($('secret-dialog'), go);
  }

  async function doRotate(ep, go) {
    go.disabled = true;
    const body = $('secret-body');
    const foot = $('secret-foot');
    try {
      const { data } = await api('POST', `${tenantPath()}/endpoints/${encodeURIComponent(ep.id)}/secret/rotate`);
      const secret = data && data.secret;
      clear(body);
      clear(foot);
      const value = h('code', { class: 'secret-value', id: 'new-secret', dataset: { testid: 'new-secret' }, text: secret || '' });
      const status = h('span', { class: 'muted', role: 'status', 'aria-live': 'polite' });
      const copy = button('Copy', { dataset: { action: 'copy-secret' } });
      copy.addEventListener('click', async () => {
        try {
          await navigator.clipboard.writeText(value.textContent);
          status.textContent = 'Copied.';
        } catch (_) {
          const range = document.createRange();
          range.selectNodeContents(value);
          const sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(range);
          status.textContent = 'Selected: press Ctrl+C (⌘C) to copy.';
        }
      });
      const overlap = data && data.previous_secret_expires_at
        ? `The old secret keeps signing until ${fmtTime(data.previous_secret_expires_at)}.` : '';
      body.append(
        h('p', { class: 'callout', text: 'Copy the new secret now: it is shown only once and cannot be read back.' }),
        h('div', { class: 'secret-box' }, value, copy),
        status,
        overlap ? h('p', { class: 'muted', text: overlap }) : null);
      const done = button('Done', { kind: 'btn-primary', dataset: { close: '' } });
      foot.append(done);
      copy.focus();
      if (data && data.id) {
        const clean = Object.assign({}, data);
        delete clean.secret; // never kept in the page's state
        replaceEndpoint(clean);
      }
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      body.appendChild(h('p', { class: 'form-error', role: 'alert', text: errorText(e) }));
      go.disabled = false;
    }
  }

  // ---------------------------------------------------------------------------------------
  // Deliveries

  function normalizeDelivery(item) {
    if (item && item.delivery) return { delivery: item.delivery, attempts: item.attempts || null, event: item.event || null };
    return { delivery: item, attempts: null, event: null };
  }

  function renderEndpointFilter() {
    const sel = $('filter-endpoint');
    const keep = sel.value;
    while (sel.options.length > 1) sel.remove(1);
    for (const ep of state.endpoints) {
      sel.appendChild(h('option', { value: ep.id, text: ep.url }));
    }
    sel.value = state.endpoints.some((e) => e.id === keep) ? keep : '';
  }

  let deliveriesSeq = 0;
  async function loadDeliveries() {
    const seq = ++deliveriesSeq;
    const endpoint = $('filter-endpoint').value;
    const st = $('filter-state').value;
    const status = $('deliveries-status');
    status.textContent = 'Loading…';
    let path = `${tenantPath()}/deliveries/recent`;
    if (endpoint || st) {
      const q = new URLSearchParams();
      if (endpoint) q.set('endpoint', endpoint);
      if (st) q.set('state', st);
      q.set('limit', '25');
      path = `${tenantPath()}/deliveries?${q}`;
    }
    try {
      const { data } = await api('GET', path);
      if (seq !== deliveriesSeq) return;
      state.deliveries = ((data && data.deliveries) || []).map(normalizeDelivery);
      renderDeliveries();
      const n = state.deliveries.length;
      status.textContent = n ? `${n} ${n === 1 ? 'delivery' : 'deliveries'}${endpoint || st ? ' match the filters' : ', newest first'}.`
        : (endpoint || st ? 'No delivery matches these filters.' : 'No deliveries yet.');
    } catch (e) {
      if (seq !== deliveriesSeq) return;
      if (e instanceof ApiError && e.status === 401) return;
      if (e instanceof ApiError && e.code === 'unknown_tenant') {
        state.deliveries = [];
        renderDeliveries();
        status.textContent = 'No deliveries yet.';
        return;
      }
      status.textContent = `Could not load deliveries: ${errorText(e)}`;
    }
  }

  function endpointLabel(id) {
    const ep = endpointById(id);
    return ep ? ep.url : `endpoint ${id}`;
  }

  function renderDeliveries() {
    const body = $('deliveries-body');
    clear(body);
    for (const item of state.deliveries) {
      const d = item.delivery;
      const type = d.event_type || (item.event && item.event.type) || '—';
      const key = d.ordering_key || (item.event && item.event.ordering_key) || '';
      const open = h('button', {
        type: 'button',
        class: 'btn-link',
        dataset: { testid: 'delivery-open' },
        'aria-label': `Delivery ${d.id}, ${type}, ${humanize(d.status)}: show attempts`,
      }, timeEl(d.created_at));
      const row = h('tr', { dataset: { testid: 'delivery-row', deliveryId: d.id, status: d.status, endpointId: d.endpoint } },
        h('td', { 'data-label': 'Time' }, open),
        h('td', { 'data-label': 'Event type', class: 'cell-type' }, type,
          d.test ? h('span', { class: 'badge badge-plain tag-test', text: 'test' }) : null,
          key ? h('span', { class: 'muted mono', title: 'Ordering key', dataset: { testid: 'delivery-ordering-key' }, text: ` · ${key}` }) : null),
        h('td', { 'data-label': 'Endpoint', class: 'cell-endpoint', title: endpointLabel(d.endpoint), text: endpointLabel(d.endpoint) }),
        h('td', { 'data-label': 'Response', class: 'mono', text: responseText(d) }),
        h('td', { 'data-label': 'Attempts', class: 'num', text: d.attempts }),
        h('td', { 'data-label': 'Status' }, statusBadge(d.status, d.outcome_pending ? 'outcome unknown' : '')));
      row.addEventListener('click', (e) => {
        // The time button opens it itself (Enter and Space included).
        if (e.target instanceof Element && e.target.closest('button')) return;
        openDelivery(d.id);
      });
      open.addEventListener('click', () => openDelivery(d.id));
      body.appendChild(row);
    }
  }

  // The event's payload exactly as the server sent it: the raw bytes after the event's
  // "payload" key (write_delivery_full puts the event last: ...,"event":{...,"payload":RAW}}),
  // checked against the parsed value; null when they cannot be isolated.
  function rawPayload(text, payload) {
    if (typeof text !== 'string' || payload === undefined || payload === null) return null;
    const ev = text.indexOf('"event":{');
    if (ev < 0) return null;
    const key = text.indexOf('"payload":', ev);
    if (key < 0) return null;
    let end = text.length;
    while (end > 0 && /\s/.test(text[end - 1])) end--;
    if (text.slice(end - 2, end) !== '}}') return null;
    const raw = text.slice(key + '"payload":'.length, end - 2);
    try {
      if (JSON.stringify(JSON.parse(raw)) !== JSON.stringify(payload)) return null;
    } catch (_) {
      return null;
    }
    return raw;
  }

  let detailSeq = 0;
  let openedDelivery = '';
  async function openDelivery(id) {
    const seq = ++detailSeq;
    openedDelivery = id;
    const dlg = $('delivery-dialog');
    const box = $('delivery-detail');
    clear(box);
    $('delivery-dialog-title').textContent = `Delivery ${id}`;
    box.appendChild(h('p', { class: 'muted', role: 'status', text: 'Loading…' }));
    openDialog(dlg, dlg.querySelector('[data-close]'));
    try {
      const res = await api('GET', `${tenantPath()}/deliveries/${encodeURIComponent(id)}`);
      if (seq !== detailSeq) return;
      renderDeliveryDetail(res.data, rawPayload(res.text, res.data && res.data.event ? res.data.event.payload : null));
    } catch (e) {
      if (seq !== detailSeq) return;
      if (e instanceof ApiError && e.status === 401) return;
      clear(box);
      box.appendChild(h('p', { class: 'form-error', role: 'alert', text: `Could not load the delivery: ${errorText(e)}` }));
    }
  }

  function renderDeliveryDetail(detail, raw) {
    const box = $('delivery-detail');
    clear(box);
    const d = detail.delivery;
    const ev = detail.event;
    const type = d.event_type || (ev && ev.type) || '—';
    box.dataset.deliveryId = d.id;
    $('delivery-dialog-title').textContent = `Delivery ${d.id}`;

    const sum = h('dl', { class: 'detail-summary' });
    const item = (k, v) => sum.appendChild(h('div', {}, h('dt', { text: k }), h('dd', {}, v)));
    item('Status', statusBadge(d.status, d.outcome_pending ? 'outcome unknown' : ''));
    item('Event type', h('span', { class: 'mono', text: type }));
    const key = d.ordering_key || (ev && ev.ordering_key);
    if (key) item('Ordering key', h('span', { class: 'mono', dataset: { testid: 'delivery-ordering-key' }, text: key }));
    item('Endpoint', h('span', { class: 'mono', text: endpointLabel(d.endpoint) }));
    item('Created', timeEl(d.created_at));
    item('Attempts', String(d.attempts));
    item('Last response', h('span', { class: 'mono', text: responseText(d) }));
    if (d.next_attempt_at) item('Next attempt', timeEl(d.next_attempt_at));
    if (d.event_id || (ev && ev.id)) item('Event id', h('span', { class: 'mono', text: d.event_id || ev.id }));
    if (ev && ev.message_id) item('Webhook id', h('span', { class: 'mono', text: ev.message_id }));
    box.appendChild(sum);

    // Attempts, in time order.
    const hist = detail.attempts || [];
    const list = h('ol', { class: 'attempts', dataset: { testid: 'attempt-list' } });
    for (const a of hist) list.appendChild(attemptItem(a));
    box.appendChild(h('section', { class: 'detail-section', 'aria-labelledby': 'attempts-h' },
      h('h3', { id: 'attempts-h', text: `History (${hist.length})` }),
      hist.length ? list : h('p', { class: 'muted', text: 'No attempt yet.' })));

    // The body that was sent.
    let bodyText = '';
    let note = '';
    if (raw !== null && raw !== undefined) {
      bodyText = raw;
      note = 'Exactly as sent';
    } else if (ev && ev.payload !== undefined && ev.payload !== null) {
      bodyText = JSON.stringify(ev.payload, null, 2);
      note = 'Reformatted';
    }
    box.appendChild(h('section', { class: 'detail-section', 'aria-labelledby': 'body-h' },
      h('h3', { id: 'body-h' }, 'Body sent ', note ? h('span', { class: 'muted', text: `· ${note}` }) : null),
      bodyText
        ? h('pre', { class: 'code', id: 'delivery-body', dataset: { testid: 'delivery-body' }, tabindex: '0', text: bodyText })
        : h('p', { class: 'muted', text: 'The event is no longer kept.' })));

    if (canManage()) box.appendChild(detailActions(d));
  }

  function attemptItem(a) {
    const li = h('li', { class: 'attempt', dataset: { testid: 'attempt-row', kind: a.kind || 'attempt' } });
    if (a.kind === 'attempt' || !a.kind) {
      const ok = a.outcome === 'success';
      li.appendChild(h('div', { class: 'attempt-head' },
        h('strong', { text: `Attempt ${a.number}` }),
        h('span', { class: `badge ${ok ? 'badge-ok' : a.outcome === 'unknown' ? 'badge-warn' : 'badge-bad'}`, text: humanize(a.outcome) }),
        h('span', { class: 'mono', dataset: { testid: 'attempt-status' }, text: a.http_status ? `HTTP ${a.http_status}` : 'no HTTP answer' }),
        a.code ? h('code', { dataset: { testid: 'attempt-code' }, text: a.code }) : null,
        h('span', { class: 'muted' }, timeEl(a.started_at)),
        h('span', { class: 'muted', text: fmtMs(a.duration_ms) })));
      const t = a.timings || {};
      li.appendChild(h('ul', { class: 'timings', 'aria-label': 'Timings' },
        h('li', { text: `DNS ${fmtMs(t.dns_ms)}` }),
        h('li', { text: `connect ${fmtMs(t.connect_ms)}` }),
        h('li', { text: `TLS ${fmtMs(t.tls_ms)}` }),
        h('li', { text: `first byte ${fmtMs(t.first_byte_ms)}` }),
        h('li', { text: `total ${fmtMs(t.total_ms)}` }),
        a.ladder && a.ladder !== 'none' ? h('li', { text: `${a.ladder} ladder` }) : null,
        a.request_written === false ? h('li', { text: 'request not sent' }) : null));
    } else if (a.kind === 'status_check') {
      li.appendChild(h('div', { class: 'attempt-head' },
        h('strong', { text: `Status check after attempt ${a.after_attempt}` }),
        h('span', { class: 'badge badge-info', text: humanize(a.answer) }),
        a.http_status ? h('span', { class: 'mono', text: `HTTP ${a.http_status}` }) : null,
        a.code ? h('code', { text: a.code }) : null,
        h('span', { class: 'muted' }, timeEl(a.started_at)),
        h('span', { class: 'muted', text: fmtMs(a.duration_ms) })));
    } else if (a.kind === 'superseded') {
      // SPEC R13.3: never sent; a newer delivery of the same ordering key went instead.
      li.appendChild(h('div', { class: 'attempt-head' },
        h('strong', { text: 'Superseded' }),
        a.by ? h('span', { class: 'mono', text: `by delivery ${a.by}` }) : null,
        h('span', { class: 'muted' }, timeEl(a.at))));
      return li;
    } else {
      li.appendChild(h('div', { class: 'attempt-head' },
        h('strong', { text: a.kind === 'resend' ? 'Resent' : `Resolved as ${a.resolved_as}` }),
        h('span', { class: 'muted' }, timeEl(a.at))));
      if (a.note) li.appendChild(h('p', { class: 'muted', text: a.note }));
      return li;
    }
    const prefix = a.response_prefix || '';
    li.appendChild(prefix
      ? h('pre', { class: 'code code-light', dataset: { testid: 'response-prefix' }, 'aria-label': 'Response body (first 512 bytes)', tabindex: '0', text: prefix })
      : h('p', { class: 'muted', dataset: { testid: 'response-prefix' }, text: 'Empty response body.' }));
    return li;
  }

  function detailActions(d) {
    const wrap = h('section', { class: 'detail-section', 'aria-labelledby': 'actions-h' },
      h('h3', { id: 'actions-h', text: 'Actions' }));
    const out = h('p', { class: 'status-line', role: 'status', 'aria-live': 'polite', dataset: { testid: 'detail-result' } });
    const row = h('div', { class: 'detail-actions' });
    if (!d.test && TERMINAL.has(d.status)) {
      const resend = button('Resend', { dataset: { action: 'resend' } });
      resend.addEventListener('click', async () => {
        resend.disabled = true;
        out.textContent = 'Resending…';
        try {
          await api('POST', `${tenantPath()}/deliveries/${encodeURIComponent(d.id)}/resend`, {});
          out.textContent = 'Resent: the same delivery goes out again (same webhook id).';
          loadDeliveries();
          loadOrdering(); // a resent head releases its held key (SPEC R13)
        } catch (e) {
          if (e instanceof ApiError && e.status === 401) return;
          out.textContent = `Resend refused: ${errorText(e)}`;
          resend.disabled = false;
        }
      });
      row.appendChild(resend);
    }
    // Recover: every failed, dead or unknown delivery of this endpoint since a time.
    const since = h('input', { type: 'datetime-local', id: 'recover-since', step: '1' });
    const start = new Date(Date.now() - 24 * 3600 * 1000);
    since.value = localInputValue(start);
    const go = button('Recover since', { dataset: { action: 'recover' } });
    const form = h('div', { class: 'recover-form' },
      h('div', { class: 'field' }, h('label', { for: 'recover-since', text: 'Resend every failed delivery of this endpoint since' }), since),
      go);
    go.addEventListener('click', async () => {
      const t = new Date(since.value);
      if (Number.isNaN(t.getTime())) {
        out.textContent = 'Choose a date and time.';
        since.focus();
        return;
      }
      go.disabled = true;
      out.textContent = 'Starting a recover job…';
      try {
        const { data } = await api('POST', `${tenantPath()}/endpoints/${encodeURIComponent(d.endpoint)}/recover`, { since: t.toISOString() });
        await followJob(data.job, out);
        loadDeliveries();
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) return;
        out.textContent = `Recover refused: ${errorText(e)}`;
      } finally {
        go.disabled = false;
      }
    });
    row.appendChild(form);
    wrap.append(row, out);
    return wrap;
  }

  function localInputValue(d) {
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  }

  async function followJob(job, out) {
    const deadline = Date.now() + 10 * 60 * 1000;
    while (job) {
      const progress = job.scan_done
        ? `${job.requeued} of ${job.total} resent, ${job.skipped} skipped`
        : `${job.scanned} looked at, ${job.requeued} resent so far`;
      if (job.state === 'done') {
        out.textContent = `Recover done: ${progress}.`;
        return;
      }
      if (job.state === 'failed') {
        out.textContent = `Recover failed: ${job.error || 'unknown reason'} (${progress}).`;
        return;
      }
      out.textContent = `Recovering: ${progress}…`;
      if (Date.now() > deadline) return;
      await sleep(700);
      const { data } = await api('GET', `${tenantPath()}/jobs/${encodeURIComponent(job.id)}`);
      job = data && data.job;
    }
  }

  // ---------------------------------------------------------------------------------------
  // Breaker and the attempts chart

  const BREAKER_TEXT = {
    closed: ['badge-ok', 'Closed', 'Deliveries go out normally.'],
    open: ['badge-bad', 'Open', 'Too many deliveries failed recently, so deliveries are held (no attempts are spent) until a probe succeeds.'],
    half_open: ['badge-warn', 'Half-open', 'One probe delivery is being tried; the others wait for its result.'],
  };

  async function loadBreaker() {
    const box = $('breaker');
    try {
      const { data } = await api('GET', `${tenantPath()}/breaker`);
      clear(box);
      // SPEC R4: only endpoints on a policy with a breaker (xhub-shaped) feed it; a tenant whose
      // endpoints all use smengo-shaped policies has one that never opens: say so, not "0 of 0".
      if (data.endpoints_using_breaker === 0) {
        box.dataset.state = 'unused';
        box.append(
          h('div', { class: 'breaker-state' }, h('span', { class: 'badge badge-plain', dataset: { testid: 'breaker-state' }, text: 'Not used' })),
          h('p', { class: 'breaker-explain', dataset: { testid: 'breaker-explain' }, text: 'None of these endpoints uses a circuit breaker: their retry policies retry each delivery on its own ladder, whatever the others do.' }));
        return;
      }
      const [cls, label, text] = BREAKER_TEXT[data.state] || ['', humanize(data.state), ''];
      box.dataset.state = data.state;
      box.append(
        h('div', { class: 'breaker-state' }, h('span', { class: `badge ${cls}`, dataset: { testid: 'breaker-state' }, text: label }),
          h('span', { class: 'muted', text: `${data.window_failed} of ${data.window_total} recent deliveries failed (${data.endpoints_using_breaker} of ${data.endpoints} endpoints use the breaker)` })),
        h('p', { class: 'breaker-explain', dataset: { testid: 'breaker-explain' }, text }));
      const facts = h('dl', { class: 'facts' });
      if (data.opened_at) facts.append(h('dt', { text: 'Opened' }), h('dd', {}, timeEl(data.opened_at)));
      if (data.reopen_at) facts.append(h('dt', { text: 'Next probe' }), h('dd', {}, timeEl(data.reopen_at)));
      if (data.failed_probes) facts.append(h('dt', { text: 'Failed probes' }), h('dd', { text: data.failed_probes }));
      if (facts.childNodes.length) box.appendChild(facts);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      clear(box);
      box.appendChild(h('p', { class: 'muted', text: e instanceof ApiError && e.status === 404 ? 'No breaker state yet.' : `Not available: ${errorText(e)}` }));
    }
  }

  async function loadChart() {
    const box = $('attempts-chart');
    const summary = $('chart-summary');
    try {
      const { data } = await api('GET', `${tenantPath()}/stats/attempts`);
      drawChart(box, summary, data);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      clear(box);
      box.dataset.state = 'error';
      summary.textContent = `The chart is not available: ${errorText(e)}`;
    }
  }

  function drawChart(box, summary, data) {
    clear(box);
    const buckets = (data && data.buckets) || [];
    box.dataset.state = 'ready';
    box.dataset.buckets = String(buckets.length);
    const W = 360;
    const H = 170;
    const left = 30;
    const right = 6;
    const top = 8;
    const bottom = 22;
    const plotW = W - left - right;
    const plotH = H - top - bottom;
    let max = 0;
    const totals = { delivered: 0, failed: 0, unknown: 0 };
    for (const b of buckets) {
      const t = (b.delivered || 0) + (b.failed || 0) + (b.unknown || 0);
      max = Math.max(max, t);
      totals.delivered += b.delivered || 0;
      totals.failed += b.failed || 0;
      totals.unknown += b.unknown || 0;
    }
    const step = niceStep(max);
    const yMax = Math.max(step, Math.ceil(max / step) * step);
    const y = (v) => top + plotH - (v / yMax) * plotH;

    const titleId = 'chart-svg-title';
    const descId = 'chart-svg-desc';
    const total = totals.delivered + totals.failed + totals.unknown;
    const svg = s('svg', {
      viewBox: `0 0 ${W} ${H}`,
      role: 'img',
      'aria-labelledby': `${titleId} ${descId}`,
      preserveAspectRatio: 'xMidYMid meet',
    },
    s('title', { id: titleId, text: 'Attempts by outcome per hour, last 24 hours' }),
    s('desc', { id: descId, text: `${totals.delivered} delivered, ${totals.failed} failed, ${totals.unknown} unknown.` }));

    for (let v = 0; v <= yMax; v += step) {
      svg.appendChild(s('line', { class: 'grid-line', x1: left, x2: W - right, y1: y(v), y2: y(v) }));
      svg.appendChild(s('text', { class: 'axis-label', x: left - 4, y: y(v) + 3, 'text-anchor': 'end', text: v }));
    }
    const n = Math.max(buckets.length, 1);
    const slot = plotW / n;
    const bw = Math.max(2, slot * 0.68);
    buckets.forEach((b, i) => {
      const x = left + i * slot + (slot - bw) / 2;
      let base = 0;
      const g = s('g', {});
      for (const k of ['delivered', 'failed', 'unknown']) {
        const v = b[k] || 0;
        if (!v) continue;
        const y0 = y(base);
        const y1 = y(base + v);
        g.appendChild(s('rect', { class: `bar-${k}`, x: x.toFixed(2), y: y1.toFixed(2), width: bw.toFixed(2), height: Math.max(0.5, y0 - y1).toFixed(2) }));
        base += v;
      }
      const start = new Date(b.start);
      const label = Number.isNaN(start.getTime()) ? String(b.start) : timeOnly.format(start);
      g.appendChild(s('rect', { class: 'bar-hit', x: (left + i * slot).toFixed(2), y: top, width: slot.toFixed(2), height: plotH },
        s('title', { text: `${label}: ${b.delivered || 0} delivered, ${b.failed || 0} failed, ${b.unknown || 0} unknown` })));
      svg.appendChild(g);
      if (i % 6 === 0 || i === buckets.length - 1) {
        svg.appendChild(s('text', { class: 'axis-label', x: (left + i * slot + slot / 2).toFixed(2), y: H - 6, 'text-anchor': 'middle', text: i === buckets.length - 1 ? 'now' : label }));
      }
    });
    box.appendChild(svg);
    box.appendChild(h('ul', { class: 'legend', 'aria-hidden': 'true' },
      h('li', {}, h('span', { class: 'swatch swatch-delivered' }), `Delivered (${totals.delivered})`),
      h('li', {}, h('span', { class: 'swatch swatch-failed' }), `Failed (${totals.failed})`),
      h('li', {}, h('span', { class: 'swatch swatch-unknown' }), `Unknown (${totals.unknown})`)));
    let busiest = null;
    for (const b of buckets) {
      const t = (b.delivered || 0) + (b.failed || 0) + (b.unknown || 0);
      if (t && (!busiest || t > busiest.t)) busiest = { t, start: b.start };
    }
    let text = total
      ? `${total} attempts in the last 24 hours: ${totals.delivered} delivered, ${totals.failed} failed, ${totals.unknown} with an unknown outcome.`
      : 'No attempts in the last 24 hours.';
    if (busiest) text += ` Busiest hour: ${timeOnly.format(new Date(busiest.start))} (${busiest.t}).`;
    if (data && data.truncated) text += ' Counts are partial (too many attempts to count them all).';
    summary.textContent = text;
  }

  function niceStep(max) {
    if (max <= 4) return 1;
    const raw = max / 4;
    const mag = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 5, 10]) if (raw <= m * mag) return m * mag;
    return 10 * mag;
  }

  function refreshHealth() {
    loadBreaker();
    loadChart();
  }

  // ---------------------------------------------------------------------------------------
  // Start

  async function refreshAll() {
    try {
      await loadEndpoints();
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      const list = $('endpoints');
      clear(list);
      list.appendChild(h('p', { class: 'empty', text: e instanceof ApiError && e.code === 'unknown_tenant' ? 'No endpoints yet. Your platform adds them for you.' : `Could not load endpoints: ${errorText(e)}` }));
    }
    await Promise.all([loadDeliveries(), loadBreaker(), loadChart()]);
  }

  async function main() {
    wireDialogs();
    $('edit-form').addEventListener('submit', submitEdit);
    $('filter-endpoint').addEventListener('change', loadDeliveries);
    $('filter-state').addEventListener('change', loadDeliveries);
    $('delivery-filters').addEventListener('submit', (e) => e.preventDefault());
    $('refresh-deliveries').addEventListener('click', loadDeliveries);
    $('refresh-all').addEventListener('click', refreshAll);

    const sess = await startSession();
    if (!sess) return;
    state.session = sess;
    showSession();
    $('loading').hidden = true;
    $('app').hidden = false;
    await refreshAll();
    document.body.dataset.ready = 'true';
  }

  main();
})();
