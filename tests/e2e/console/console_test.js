// Drives the approvals console in headless Chromium (playwright-core, installed by
// deploy/install-deps.sh into /opt/sluice-test-node) against a real `sluice run`; run by
// tests/e2e/test_console.py, which starts sluice, holds a request and afterwards checks
// the outcome at the proxy. Input (environment): CONSOLE_URL, CONSOLE_TOKEN, APPROVAL_ID,
// KILL_IDENTITY, SCREENSHOT_DIR. Prints one JSON line with what it saw; exit 1 on failure.
'use strict';

const path = require('path');
const prefix = process.env.SLUICE_TEST_NODE_PREFIX || '/opt/sluice-test-node';
const { chromium } = require(path.join(prefix, 'node_modules', 'playwright-core'));

const need = (k) => {
  const v = process.env[k];
  if (!v) throw new Error('missing environment variable ' + k);
  return v;
};

async function main() {
  const url = need('CONSOLE_URL');
  const token = need('CONSOLE_TOKEN');
  const approvalId = need('APPROVAL_ID');
  const killIdentity = need('KILL_IDENTITY');
  const shots = need('SCREENSHOT_DIR');
  const seen = { console_errors: [], external_requests: [] };

  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(20000);
    page.on('console', (m) => { if (m.type() === 'error') seen.console_errors.push(m.text()); });
    page.on('request', (r) => {
      if (!r.url().startsWith(new URL(url).origin)) seen.external_requests.push(r.url());
    });
    page.on('dialog', (d) => d.accept());

    await page.goto(url);
    await page.waitForSelector('#login-form', { state: 'visible' });

    // A wrong token is refused and the form comes back with a message.
    await page.fill('#token', 'not-the-token');
    await page.click('#open');
    await page.waitForFunction(() => document.querySelector('#login-error').textContent.includes('refused'));
    seen.wrong_token_message = await page.textContent('#login-error');

    await page.fill('#token', token);
    await page.fill('#by', 'console-tester');
    await page.click('#open');
    const card = page.locator(`article.approval[data-approval-id="${approvalId}"]`);
    await card.waitFor({ state: 'visible' });
    seen.card_text = await card.innerText();
    seen.finding_rows = await card.locator('table.findings tbody tr').count();
    const group = page.locator(`article.identity[data-identity="${killIdentity}"]`);
    await group.waitFor({ state: 'visible' });
    await page.waitForFunction(
      (id) => document.querySelector(`article.identity[data-identity="${id}"] tbody tr`) !== null,
      killIdentity);
    seen.storage = await page.evaluate(() => ({
      session: sessionStorage.getItem('sluice-admin-token') !== null,
      local: localStorage.length,
    }));
    await page.screenshot({ path: path.join(shots, 'console-pending.png'), fullPage: true });

    // Approve: the card leaves the page once the API no longer lists it.
    await card.locator('input.reason').fill('checked in the browser test');
    await card.locator('button[data-role="approve"]').click();
    await card.waitFor({ state: 'detached' });
    seen.message_after_approve = await page.textContent('#message');

    // Kill the identity: its badge turns "killed" and Revive appears.
    await group.locator('button[data-role="kill"]').click();
    await page.waitForFunction(
      (id) => document.querySelector(`article.identity[data-identity="${id}"] [data-role="state"]`).textContent === 'killed',
      killIdentity);
    seen.message_after_kill = await page.textContent('#message');
    seen.revive_visible = await group.locator('button[data-role="revive"]').isVisible();
    seen.killswitch = await page.textContent('#killswitch');
    await page.screenshot({ path: path.join(shots, 'console-killed.png'), fullPage: true });
    seen.ok = true;
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(seen) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
