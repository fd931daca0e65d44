// The merchant portal in a real browser (docs/operations.md "The portal"): playwright-core drives
// Debian's /usr/bin/chromium (headless, fresh profile, nothing downloaded) through the portal of a
// running `ringcast serve` that tests/e2e/portal_test.cc prepared. Every step is an assertion: the
// first that fails prints its message, and the script exits 1. A JSON summary goes to stdout.
//
// Environment (all set by E2ePortal.BrowserWalkthrough):
//   RINGCAST_PORTAL_BASE_URL      http://127.0.0.1:<port> of the daemon (node 0)
//   RINGCAST_PORTAL_ADMIN_TOKEN   the admin bearer token (mints portal links)
//   RINGCAST_PORTAL_TENANT        the tenant
//   RINGCAST_PORTAL_HEALTHY_ID    an enabled endpoint whose receiver answers 200
//   RINGCAST_PORTAL_GONE_ID       an endpoint auto-disabled by a 410 (reason "gone")
//   RINGCAST_PORTAL_HOSTILE_ID    an endpoint whose receiver answers a hostile body
//   RINGCAST_PORTAL_HOSTILE_DELIVERY  a delivery of that endpoint (ended)
//   RINGCAST_PORTAL_HOSTILE_BODY  the receiver's exact response body
//   RINGCAST_PORTAL_ORDERED_ID    a per_key endpoint (SPEC R13) whose key "cart-7" is held
//   RINGCAST_PORTAL_HELD_BY       the failed delivery that holds it (on_head_failure block)
//   RINGCAST_PORTAL_SCREENSHOTS   where to save the screenshots (created)
//   RINGCAST_PORTAL_NODE_DIR      the dir tests/portal/setup.sh installed node_modules into
//   RINGCAST_PORTAL_CHROMIUM      the browser (default /usr/bin/chromium)
//   RINGCAST_PORTAL_TIMEOUT_MS    per-wait timeout (default 20000)
//   RINGCAST_PORTAL_EMBED_PORT    a free port for the embedding platform's page, which the
//                                 daemon's portal.frame_ancestors names as http://localhost:<port>
//                                 (0 or unset: the iframe step is skipped)
// Links are minted here with the admin token: POST /v1/tenants/{t}/portal-links
// {"scope", "ttl_seconds"?} → {"url", "token", "scope", "expires_at"}.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const env = (name, fallback) => {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (fallback !== undefined) return fallback;
    fail(`environment variable ${name} is not set`);
  }
  return v;
};

const summary = { ok: false, steps: [], screenshots: [], console_errors: [], csp_violations: [] };
let browser = null;

function fail(message) {
  summary.ok = false;
  summary.error = message;
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  process.stderr.write(`walkthrough FAILED: ${message}\n`);
  const done = browser ? browser.close().catch(() => {}) : Promise.resolve();
  done.finally(() => process.exit(1));
  throw new Error(message); // stop the current step
}

function check(cond, message) {
  if (!cond) fail(message);
}

const base = env('RINGCAST_PORTAL_BASE_URL').replace(/\/+$/, '');
const adminToken = env('RINGCAST_PORTAL_ADMIN_TOKEN');
const tenant = env('RINGCAST_PORTAL_TENANT');
const healthyId = env('RINGCAST_PORTAL_HEALTHY_ID');
const goneId = env('RINGCAST_PORTAL_GONE_ID');
const hostileId = env('RINGCAST_PORTAL_HOSTILE_ID');
const hostileDelivery = env('RINGCAST_PORTAL_HOSTILE_DELIVERY');
const hostileBody = env('RINGCAST_PORTAL_HOSTILE_BODY');
const orderedId = env('RINGCAST_PORTAL_ORDERED_ID');
const heldBy = env('RINGCAST_PORTAL_HELD_BY');
const shots = env('RINGCAST_PORTAL_SCREENSHOTS');
const nodeDir = env('RINGCAST_PORTAL_NODE_DIR');
const chromium = env('RINGCAST_PORTAL_CHROMIUM', '/usr/bin/chromium');
const T = Number(env('RINGCAST_PORTAL_TIMEOUT_MS', '20000'));
const embedPort = Number(env('RINGCAST_PORTAL_EMBED_PORT', '0'));
const tpath = `/v1/tenants/${encodeURIComponent(tenant)}`;

fs.mkdirSync(shots, { recursive: true });

// playwright-core lives outside the source tree (setup.sh put it into nodeDir).
let pw;
try {
  pw = createRequire(path.join(path.resolve(nodeDir), 'package.json'))('playwright-core');
} catch (e) {
  fail(`playwright-core not found under ${nodeDir}/node_modules (run tests/portal/setup.sh ${nodeDir}): ${e.message}`);
}

// --- the admin side (what the embedding platform does) ---------------------------------------

async function adminCall(method, p, body) {
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(base + p, {
      method,
      headers: Object.assign({ Authorization: `Bearer ${adminToken}` },
        body === undefined ? {} : { 'Content-Type': 'application/json' }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    if (r.status === 503 && attempt < 20) { // cluster mode: a partition between owners
      await new Promise((res) => setTimeout(res, 250));
      continue;
    }
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
    return { status: r.status, json, text };
  }
}

async function mintLink(body) {
  const r = await adminCall('POST', `${tpath}/portal-links`, body);
  check(r.status === 201 || r.status === 200,
    `POST ${tpath}/portal-links ${JSON.stringify(body)} answered ${r.status} ${r.text}`);
  check(r.json && typeof r.json.token === 'string' && r.json.token && typeof r.json.url === 'string',
    `portal-links answer lacks url/token: ${r.text}`);
  return r.json;
}

function linkUrl(link) {
  // The answer's URL, on the origin the test reaches (a configured public URL may differ).
  const u = new URL(link.url, base);
  if (u.origin !== new URL(base).origin) return `${base}/portal/#link=${encodeURIComponent(link.token)}`;
  return u.toString();
}

// --- the browser ----------------------------------------------------------------------------

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    if (summary.error) throw e; // fail() already reported
    fail(`${name}: ${e && e.message ? e.message.split('\n')[0] : e}`);
  }
  summary.steps.push({ name, ms: Date.now() - t0 });
}

// Console errors a step expects (the browser logs every 4xx answer of fetch); null: none.
let expectedConsole = null;

function watch(page, sink) {
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (expectedConsole && expectedConsole.test(m.text())) return;
    // Cluster mode: a read can meet a partition between owners (503, Retry-After: 1); the
    // portal retries it, the browser still logs it. Counted, not an error.
    if (/status of 503/.test(m.text())) {
      summary.retried_503 = (summary.retried_503 || 0) + 1;
      return;
    }
    sink.console_errors.push(m.text());
  });
  page.on('pageerror', (e) => sink.console_errors.push(`pageerror: ${e.message}`));
}

// A browser context (its own cookies) in which every CSP violation is recorded, from a listener
// the page's own CSP cannot block.
async function newContext() {
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  await ctx.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  return ctx;
}

const card = (id) => `[data-testid="endpoint-card"][data-endpoint-id="${id}"]`;

async function main() {
  let context;
  await step('launch chromium', async () => {
    check(fs.existsSync(chromium), `${chromium} is missing (apt-get install chromium)`);
    // launch() gives the browser a fresh temporary profile (user-data-dir), removed at close.
    browser = await pw.chromium.launch({
      executablePath: chromium,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      timeout: 60000,
    });
    summary.browser = browser.version();
    context = await newContext();
  });

  const page = await context.newPage();
  page.setDefaultTimeout(T);
  watch(page, summary);

  const link = await (async () => {
    let l;
    await step('mint a manage link', async () => { l = await mintLink({ scope: 'manage' }); });
    return l;
  })();

  await step('open the link and see the endpoint cards', async () => {
    const resp = await page.goto(linkUrl(link), { waitUntil: 'load' });
    check(resp && resp.status() === 200, `GET /portal/ answered ${resp && resp.status()}`);
    const csp = resp.headers()['content-security-policy'] || '';
    check(/script-src 'self'/.test(csp) && !/unsafe-inline|unsafe-eval/.test(csp),
      `the portal page's Content-Security-Policy is not strict: "${csp}"`);
    await page.waitForSelector('body[data-ready="true"]');
    for (const id of [healthyId, goneId, hostileId, orderedId]) {
      await page.waitForSelector(card(id), { state: 'visible' });
    }
    check(!page.url().includes('link='), `the link token stays in the address bar: ${page.url()}`);
    const url = await page.textContent(`${card(healthyId)} [data-testid="endpoint-url"]`);
    check(url && url.startsWith('http'), `the healthy card shows no URL: "${url}"`);
    check(await page.isVisible('#auth-error') === false, 'the auth error shows on a good link');
  });

  await step('an ordered endpoint shows its held key, the list its ordering key', async () => {
    // SPEC R13, docs/operations.md "Ordered delivery": the card loads the endpoint's ordering
    // keys after the cards are drawn, so the held key is waited for.
    const ordering = await page.textContent(`${card(orderedId)} [data-testid="endpoint-ordering"]`);
    check(/per key/.test(ordering) && /block/.test(ordering), `the ordered card's Ordering reads "${ordering}"`);
    const held = `${card(orderedId)} [data-testid="endpoint-held-keys"]`;
    await page.waitForFunction((sel) => {
      const el = document.querySelector(sel);
      return el && /^1 held/.test(el.textContent); // the count comes first, then one line per key
    }, held);
    const text = await page.textContent(held);
    check(text.includes(heldBy) && / 1 waiting/.test(text), `the held keys read "${text}" (held by ${heldBy})`);
    check(await page.locator(`${card(healthyId)} [data-testid="endpoint-held-keys"]`).count() === 0,
      'an unordered endpoint shows held keys');
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="delivery-row"] [data-testid="delivery-ordering-key"]')]
      .some((e) => e.textContent.includes('cart-7')));
    // The held key's delivery opens its detail (where it is resent).
    await page.click(`${held} [data-action="open-held"][data-delivery-id="${heldBy}"]`);
    await page.waitForSelector(`#delivery-detail[data-delivery-id="${heldBy}"] [data-testid="attempt-row"]`);
    const key = await page.textContent('#delivery-detail [data-testid="delivery-ordering-key"]');
    check(key === 'cart-7', `the held delivery's ordering key reads "${key}"`);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.getElementById('delivery-dialog').open);
  });

  await step('pause then resume an endpoint', async () => {
    await page.click(`${card(healthyId)} [data-action="pause"]`);
    await page.waitForSelector(`${card(healthyId)}[data-state="paused"]`);
    let ep = await adminCall('GET', `${tpath}/endpoints/${healthyId}`);
    check(ep.json && ep.json.state === 'paused', `after Pause the API says ${ep.text}`);
    await page.click(`${card(healthyId)} [data-action="resume"]`);
    await page.waitForSelector(`${card(healthyId)}[data-state="enabled"]`);
    ep = await adminCall('GET', `${tpath}/endpoints/${healthyId}`);
    check(ep.json && ep.json.state === 'enabled', `after Resume the API says ${ep.text}`);
  });

  let testDelivery = '';
  await step('send a test and see its delivery in Recent deliveries', async () => {
    await page.click(`${card(healthyId)} [data-action="test"]`);
    const result = `${card(healthyId)} [data-testid="card-result"]`;
    await page.waitForSelector(`${result}[data-kind="ok"][data-delivery-id]`, { timeout: Math.max(T, 60000) });
    const text = await page.textContent(result);
    check(/delivered/i.test(text) && /200/.test(text), `the test result reads "${text}"`);
    testDelivery = await page.getAttribute(result, 'data-delivery-id');
    await page.waitForSelector(`[data-testid="delivery-row"][data-delivery-id="${testDelivery}"]`);
    const row = await page.textContent(`[data-testid="delivery-row"][data-delivery-id="${testDelivery}"]`);
    check(/ringcast\.test/.test(row) && /delivered/i.test(row), `the test's row reads "${row}"`);
  });

  await step('see the banner on the 410-disabled endpoint', async () => {
    const banner = `${card(goneId)} [data-testid="disabled-banner"]`;
    await page.waitForSelector(banner, { state: 'visible' });
    check(await page.getAttribute(banner, 'data-reason') === 'gone',
      `banner reason is ${await page.getAttribute(banner, 'data-reason')}`);
    const text = await page.textContent(banner);
    check(/gone/.test(text) && /410/.test(text) && /Enable/.test(text) && /Send test/.test(text),
      `the banner does not explain the reason and the recovery: "${text}"`);
    check(await page.isVisible(`${card(goneId)} [data-action="enable"]`), 'no Enable button on the disabled card');
    check(await page.locator(`${card(healthyId)} [data-testid="disabled-banner"]`).count() === 0,
      'an enabled endpoint shows the disabled banner');
  });

  await step('the attempts chart and the breaker', async () => {
    await page.waitForSelector('[data-testid="attempts-chart"][data-state="ready"]');
    const bars = await page.locator('[data-testid="attempts-chart"] svg rect[class^="bar-"]:not(.bar-hit)').count();
    check(bars >= 1, 'the chart has no bar although attempts were made');
    const summaryText = await page.textContent('#chart-summary');
    check(/delivered/.test(summaryText), `chart summary: "${summaryText}"`);
    await page.waitForSelector('[data-testid="breaker-state"]');
    // Every endpoint of this tenant is on a smengo-shaped policy, which has no breaker (SPEC R4):
    // the card says so instead of "Closed — 0 of 0 recent deliveries failed".
    const breaker = (await page.textContent('[data-testid="breaker-state"]')).trim();
    check(breaker === 'Not used', `breaker card for a tenant without a breaker policy: "${breaker}"`);
    const why = await page.textContent('[data-testid="breaker-explain"]');
    check(/circuit breaker/.test(why), `breaker card explanation: "${why}"`);
  });

  await step('every control has a name and a label', async () => {
    const bad = await page.evaluate(() => {
      const out = [];
      for (const b of document.querySelectorAll('button')) {
        if (!(b.getAttribute('aria-label') || b.textContent.trim())) out.push(`button ${b.outerHTML.slice(0, 80)}`);
      }
      for (const i of document.querySelectorAll('input, select, textarea')) {
        if (!(i.labels && i.labels.length) && !i.getAttribute('aria-label')) out.push(`${i.tagName.toLowerCase()}#${i.id}`);
      }
      for (const d of document.querySelectorAll('dialog')) {
        const l = d.getAttribute('aria-labelledby');
        if (!l || !document.getElementById(l)) out.push(`dialog#${d.id}`);
      }
      if (!document.querySelector('[aria-live]')) out.push('no aria-live region');
      return out;
    });
    check(bad.length === 0, `unlabelled controls: ${bad.join(', ')}`);
  });

  await step('screenshot at 1440 px', async () => {
    await page.setViewportSize({ width: 1440, height: 900 });
    await page.evaluate(() => window.scrollTo(0, 0));
    const file = path.join(shots, 'portal-1440.png');
    await page.screenshot({ path: file, fullPage: true });
    summary.screenshots.push(file);
  });

  await step('keyboard: Tab reaches a card\'s buttons', async () => {
    await page.evaluate(() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); });
    await page.focus('body');
    let reached = null;
    for (let i = 0; i < 40 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => {
        const a = document.activeElement;
        const c = a && a.closest('[data-testid="endpoint-card"]');
        return a && a.tagName === 'BUTTON' && c ? `${c.dataset.endpointId}/${a.dataset.action}` : null;
      });
    }
    check(reached, 'Tab never reached a button in an endpoint card (40 presses)');
    summary.keyboard_reached = reached;
  });

  await step('open a delivery\'s attempt history (hostile receiver)', async () => {
    const row = `[data-testid="delivery-row"][data-delivery-id="${hostileDelivery}"]`;
    await page.waitForSelector(row);
    // Keyboard: focus the row's button and press Enter.
    await page.focus(`${row} [data-testid="delivery-open"]`);
    await page.keyboard.press('Enter');
    await page.waitForSelector(`#delivery-detail[data-delivery-id="${hostileDelivery}"] [data-testid="attempt-row"]`);
    check(await page.evaluate(() => document.getElementById('delivery-dialog').open), 'the detail dialog is not open');
    check(await page.evaluate(() => !!document.activeElement.closest('#delivery-dialog')),
      'focus did not move into the detail dialog');
    const attempts = await page.locator('#delivery-detail [data-testid="attempt-row"]').count();
    check(attempts >= 1, 'no attempt row');
    const head = await page.textContent('#delivery-detail [data-testid="attempt-row"]');
    check(/HTTP 200/.test(head) && /DNS|connect|total/.test(head), `the attempt row lacks status or timings: "${head}"`);
  });

  await step('a hostile response body renders as text', async () => {
    const prefix = await page.textContent('#delivery-detail [data-testid="response-prefix"]');
    check(prefix === hostileBody.slice(0, 512),
      `the response prefix is not the receiver's body as text:\n  got  ${JSON.stringify(prefix)}\n  want ${JSON.stringify(hostileBody)}`);
    check(await page.isVisible('#delivery-detail [data-testid="response-prefix"]'), 'the response prefix is not visible');
    const pwned = await page.evaluate(() => typeof window.__pwned);
    check(pwned === 'undefined', `window.__pwned is ${pwned}: the hostile body ran`);
    const imgs = await page.locator('#delivery-detail img, #delivery-detail script, #delivery-detail iframe').count();
    check(imgs === 0, `${imgs} element(s) were created from the hostile body`);
    const body = await page.textContent('#delivery-detail [data-testid="delivery-body"]');
    check(body.includes('<img src=x onerror='), `the body sent does not show the hostile payload as text: "${body}"`);
    await page.waitForTimeout(300); // an onerror would have fired by now
    check(await page.evaluate(() => typeof window.__pwned) === 'undefined', 'window.__pwned was set');
    const file = path.join(shots, 'delivery-detail.png');
    await page.screenshot({ path: file });
    summary.screenshots.push(file);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.getElementById('delivery-dialog').open);
    // Focus comes back in the dialog's `close` handler, a task after `open` turns false.
    await page.waitForFunction(() => document.activeElement && document.activeElement.dataset.testid === 'delivery-open',
      null, { timeout: 3000 }).catch(() => {});
    const back = await page.evaluate(() => document.activeElement && document.activeElement.dataset.testid);
    check(back === 'delivery-open', `focus did not return to the row after Escape (on ${back})`);
  });

  await step('the gone delivery\'s history shows 410 gone', async () => {
    await page.selectOption('#filter-endpoint', goneId);
    await page.waitForFunction((id) => {
      const rows = [...document.querySelectorAll('[data-testid="delivery-row"]')];
      return rows.length > 0 && rows.every((r) => r.dataset.endpointId === id);
    }, goneId);
    await page.click('[data-testid="delivery-row"] td[data-label="Status"]');
    await page.waitForSelector('#delivery-detail [data-testid="attempt-row"]');
    const text = await page.textContent('#delivery-detail [data-testid="attempt-row"]');
    check(/HTTP 410/.test(text) && /gone/.test(text), `the 410 attempt reads "${text}"`);
    await page.keyboard.press('Escape');
    await page.selectOption('#filter-endpoint', '');
  });

  await step('edit: a refused URL names the field, a good one is saved', async () => {
    await page.click(`${card(healthyId)} [data-action="edit"]`);
    await page.waitForFunction(() => document.getElementById('edit-dialog').open);
    check(await page.evaluate(() => document.activeElement.id) === 'edit-url', 'focus is not on the URL field');
    const url = await page.inputValue('#edit-url');
    expectedConsole = /status of 4\d\d/;
    await page.fill('#edit-url', 'ftp://example.com/hook');
    await page.click('#edit-save');
    await page.waitForSelector('#edit-url[aria-invalid="true"]');
    const msg = await page.textContent('#edit-url-error');
    check(/^URL: /.test(msg) && msg.length > 6, `the URL error reads "${msg}"`);
    expectedConsole = null;
    await page.fill('#edit-url', url);
    await page.fill('#edit-event-types', 'order.*\npayment.status_changed, refund.completed');
    await page.click('#edit-save');
    await page.waitForFunction(() => !document.getElementById('edit-dialog').open);
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.includes('refund.completed'), card(healthyId));
    const ep = await adminCall('GET', `${tpath}/endpoints/${healthyId}`);
    check(ep.json && JSON.stringify(ep.json.event_types) === JSON.stringify(['order.*', 'payment.status_changed', 'refund.completed']),
      `after Edit the API says ${ep.text}`);
  });

  await step('rotate secret: shown once, then gone from the page', async () => {
    await page.click(`${card(hostileId)} [data-action="rotate"]`);
    await page.click('#secret-dialog [data-action="confirm-rotate"]');
    await page.waitForSelector('[data-testid="new-secret"]');
    const secret = await page.textContent('[data-testid="new-secret"]');
    check(/^whsec_[A-Za-z0-9+/=]{20,}$/.test(secret), `the new secret reads "${secret}"`);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.getElementById('secret-dialog').open);
    // The dialog's `close` event is dispatched as a task after `open` turns false, so the page
    // is given a moment (bounded) to run its handler before the secret counts as left behind.
    const gone = await page.waitForFunction((sec) => !document.documentElement.outerHTML.includes(sec), secret,
      { timeout: 3000 }).then(() => true, () => false);
    check(gone, 'the secret stays in the page after the dialog closed');
    const ep = await adminCall('GET', `${tpath}/endpoints/${hostileId}`);
    check(ep.json && ep.json.secrets_active === 2, `after Rotate the API says ${ep.text}`);
  });

  await step('screenshot at 375 px', async () => {
    await page.setViewportSize({ width: 375, height: 812 });
    await page.waitForTimeout(200);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
    if (overflow > 376) {
      const wide = await page.evaluate(() => [...document.querySelectorAll('body *')]
        .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
        .slice(-4)
        .map((e) => `${e.tagName.toLowerCase()}.${e.className} (right ${Math.round(e.getBoundingClientRect().right)})`));
      fail(`the page scrolls sideways at 375 px (scrollWidth ${overflow}); too wide: ${wide.join(', ')}`);
    }
    check(await page.isVisible(`${card(healthyId)} [data-action="test"]`), 'card buttons are not visible at 375 px');
    await page.evaluate(() => window.scrollTo(0, 0));
    const file = path.join(shots, 'portal-375.png');
    await page.screenshot({ path: file, fullPage: true });
    summary.screenshots.push(file);
    await page.setViewportSize({ width: 1440, height: 900 });
  });

  await step('no console errors and no CSP violations', async () => {
    const csp = await page.evaluate(() => window.__csp || []);
    summary.csp_violations.push(...csp);
    check(csp.length === 0, `CSP violations: ${csp.join('; ')}`);
    check(summary.console_errors.length === 0, `console errors: ${summary.console_errors.join(' | ')}`);
  });

  await step('enable the disabled endpoint: the banner goes', async () => {
    await page.click(`${card(goneId)} [data-action="enable"]`);
    await page.waitForSelector(`${card(goneId)}[data-state="enabled"]`);
    check(await page.locator(`${card(goneId)} [data-testid="disabled-banner"]`).count() === 0, 'the banner stays after Enable');
    const ep = await adminCall('GET', `${tpath}/endpoints/${goneId}`);
    check(ep.json && ep.json.state === 'enabled', `after Enable the API says ${ep.text}`);
  });

  await step('recover (re-enabled endpoint) and resend from the detail view', async () => {
    await page.selectOption('#filter-endpoint', goneId);
    await page.waitForFunction((id) => {
      const rows = [...document.querySelectorAll('[data-testid="delivery-row"]')];
      return rows.length > 0 && rows.every((r) => r.dataset.endpointId === id);
    }, goneId);
    await page.click('[data-testid="delivery-row"] [data-testid="delivery-open"]');
    await page.waitForSelector('#delivery-detail [data-action="recover"]');
    await page.click('#delivery-detail [data-action="recover"]');
    await page.waitForFunction(() => /Recover done/.test(document.querySelector('[data-testid="detail-result"]').textContent),
      null, { timeout: Math.max(T, 30000) });
    const text = await page.textContent('[data-testid="detail-result"]');
    check(/[1-9]\d* of \d+ resent/.test(text), `the recover job reads "${text}"`);
    await page.keyboard.press('Escape');
    await page.selectOption('#filter-endpoint', hostileId);
    await page.waitForSelector(`[data-testid="delivery-row"][data-delivery-id="${hostileDelivery}"]`);
    await page.click(`[data-testid="delivery-row"][data-delivery-id="${hostileDelivery}"] [data-testid="delivery-open"]`);
    await page.waitForSelector(`#delivery-detail[data-delivery-id="${hostileDelivery}"] [data-action="resend"]`);
    await page.click('#delivery-detail [data-action="resend"]');
    await page.waitForFunction(() => /^Resent/.test(document.querySelector('[data-testid="detail-result"]').textContent));
    await page.keyboard.press('Escape');
    await page.selectOption('#filter-endpoint', '');
  });

  await step('embedded in another site\'s iframe', async () => {
    // The platform's page on another site (localhost vs 127.0.0.1) frames a fresh link; the
    // daemon lists it in portal.frame_ancestors. The portal either works in the frame or, when
    // the browser keeps the session cookie from a cross-site frame, says so and opens itself in
    // a tab of its own, where it works.
    if (!embedPort) return;
    const framed = await mintLink({ scope: 'manage' });
    const src = linkUrl(framed);
    const parent = http.createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><title>Platform</title><h1>Platform settings</h1><iframe id="portal" width="1200" height="800" src="${src.replace(/"/g, '&quot;')}"></iframe>`);
    });
    await new Promise((r) => parent.listen(embedPort, '127.0.0.1', r));
    const ctx = await newContext();
    try {
      const p = await ctx.newPage();
      await p.goto(`http://localhost:${embedPort}/`);
      const frame = await (await p.waitForSelector('#portal')).contentFrame();
      check(frame, 'the portal did not load in the iframe (frame-ancestors?)');
      await frame.waitForSelector('[data-testid="endpoint-card"], #auth-error:not([hidden])');
      if (await frame.locator('[data-testid="endpoint-card"]').count() > 0) {
        summary.iframe = 'works in the frame';
        return;
      }
      const code = await frame.getAttribute('#auth-error', 'data-code');
      check(code === 'cookie_blocked', `in a cross-site iframe the portal says "${code}"`);
      const [tab] = await Promise.all([ctx.waitForEvent('page'), frame.click('[data-action="open-tab"]')]);
      await tab.waitForSelector(card(healthyId));
      summary.iframe = 'session cookie blocked in the frame; "Open in a new tab" works';
    } finally {
      await ctx.close();
      parent.close();
    }
  });

  await step('a view-only link shows no write action', async () => {
    const view = await mintLink({ scope: 'view' });
    const p = await context.newPage();
    const errs = { console_errors: [] };
    watch(p, errs);
    await p.goto(linkUrl(view));
    await p.waitForSelector('body[data-ready="true"]');
    await p.waitForSelector(card(healthyId));
    check(await p.isVisible('#view-only-note'), 'the view-only note is not shown');
    const writes = await p.locator('[data-testid="endpoint-card"] .card-actions button').count();
    check(writes === 0, `${writes} write buttons in view scope`);
    check(errs.console_errors.length === 0, `console errors (view scope): ${errs.console_errors.join(' | ')}`);
    await p.close();
  });

  await step('an expired or tampered link is refused', async () => {
    // A fresh browser context: no session cookie.
    const ctx = await newContext();
    const p = await ctx.newPage();
    const fresh = await mintLink({ scope: 'manage' });
    const token = fresh.token;
    const i = Math.floor(token.length / 2);
    const tampered = token.slice(0, i) + (token[i] === 'A' ? 'B' : 'A') + token.slice(i + 1);
    await p.goto(`${base}/portal/#link=${encodeURIComponent(tampered)}`);
    await p.waitForSelector('#auth-error', { state: 'visible' });
    const code = await p.getAttribute('#auth-error', 'data-code');
    check(code === 'link_invalid' || code === 'link_expired', `a tampered link gives "${code}"`);
    check(!(await p.isVisible('#app')), 'the app shows after a refused link');
    check(await p.locator('[data-testid="endpoint-card"]').count() === 0, 'cards are shown after a refused link');
    // Without a session the REST API refuses the browser too.
    const st = await p.evaluate((u) => fetch(u, { credentials: 'same-origin' }).then((r) => r.status), `${tpath}/endpoints`);
    check(st === 401, `GET ${tpath}/endpoints without a session answered ${st}`);
    summary.tampered_link_code = code;
    // A link minted with the shortest life the API allows (ttl_seconds: 1), opened after it.
    const short = await mintLink({ scope: 'manage', ttl_seconds: 1 });
    let left = new Date(short.expires_at).getTime() - Date.now();
    if (!Number.isFinite(left)) left = 1000;
    await p.waitForTimeout(Math.max(0, Math.min(left, 5000)) + 600);
    await p.goto('about:blank');
    await p.goto(linkUrl(short));
    await p.waitForSelector('#auth-error', { state: 'visible' });
    const c2 = await p.getAttribute('#auth-error', 'data-code');
    check(c2 === 'link_expired', `an expired link gives "${c2}"`);
    check(/expired/i.test(await p.textContent('#auth-error-title')), 'the expired link\'s page does not say it expired');
    check(await p.locator('[data-testid="endpoint-card"]').count() === 0, 'cards are shown after an expired link');
    summary.expired_link_code = c2;
    const title = await p.textContent('#auth-error-title');
    check(/expired|not valid/i.test(title), `the refusal's title reads "${title}"`);
    const file = path.join(shots, 'expired-link.png');
    await p.screenshot({ path: file, fullPage: true });
    summary.screenshots.push(file);
    await ctx.close();
  });

  await step('still no console error', async () => {
    check(summary.console_errors.length === 0, `console errors: ${summary.console_errors.join(' | ')}`);
    const csp = await page.evaluate(() => window.__csp || []);
    check(csp.length === 0, `CSP violations: ${csp.join('; ')}`);
  });

  summary.ok = true;
  summary.test_delivery = testDelivery;
  await browser.close();
  browser = null;
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
}

main().catch((e) => {
  if (!summary.error) fail(e && e.stack ? e.stack : String(e));
});
