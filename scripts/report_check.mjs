// Opens report.html files in headless Chromium with the network off and checks what a
// reader gets: no console error, no request leaving the page, the expected sections,
// the embedded summary equal to summary.json beside it, and a full-page screenshot
// that is not blank (its pixels counted in a second, blank page); and the page's
// script at work: a drag across the first time chart zooms it and its section's other
// time charts (their x ticks change together), a double-click resets them, a click on
// a legend entry hides that series. The script runs only if the CSP's hash allows it.
// Usage: node report_check.mjs SHOTS_DIR REPORT.html:section,section ...
import { readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { chromium } from 'playwright-core';

const [shots, ...reports] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const failures = [];
for (const arg of reports) {
  const [file, wanted] = arg.split(':');
  const name = basename(dirname(file));
  const context = await browser.newContext({ offline: true, viewport: { width: 900, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  const requests = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('request', (r) => { if (!/^(file|data):/.test(r.url())) requests.push(r.url()); });
  await page.goto('file://' + file, { waitUntil: 'load' });
  const ids = await page.$$eval('section[id]', (s) => s.map((x) => x.id));
  for (const id of wanted.split(',')) {
    if (!ids.includes(id)) failures.push(`${name}: no section #${id} (has ${ids.join(', ')})`);
  }
  const embedded = JSON.parse(await page.$eval('#summary-json', (e) => e.textContent));
  const onDisk = JSON.parse(readFileSync(join(dirname(file), 'summary.json'), 'utf8'));
  if (JSON.stringify(embedded) !== JSON.stringify(onDisk)) failures.push(`${name}: the embedded summary differs from summary.json`);
  const zoomProblem = await zoomAndToggle(page);
  if (zoomProblem) failures.push(`${name}: ${zoomProblem}`);
  const shot = join(shots, `${name}.png`);
  const png = await page.screenshot({ path: shot, fullPage: true });
  const blank = await context.newPage();
  const inked = await blank.evaluate(async (data) => {
    const img = new Image();
    img.src = 'data:image/png;base64,' + data;
    await img.decode();
    const canvas = document.createElement('canvas');
    [canvas.width, canvas.height] = [img.width, img.height];
    const g = canvas.getContext('2d');
    g.drawImage(img, 0, 0);
    const px = g.getImageData(0, 0, img.width, img.height).data;
    let inked = 0;
    for (let i = 0; i < px.length; i += 4) if (px[i] < 235 || px[i + 1] < 235 || px[i + 2] < 235) inked++;
    return { inked, total: px.length / 4, height: img.height };
  }, png.toString('base64'));
  const share = inked.inked / inked.total;
  if (share < 0.02) failures.push(`${name}: the screenshot is blank (${(share * 100).toFixed(2)} % inked)`);
  for (const e of errors) failures.push(`${name}: console: ${e}`);
  for (const r of requests) failures.push(`${name}: a request left the page: ${r}`);
  console.log(`${name}: sections ${ids.join(', ')}; ${inked.height} px tall, ${(share * 100).toFixed(1)} % inked; ${shot}`);
  await context.close();
}
await browser.close();

async function zoomAndToggle(page) {
  const charts = page.locator('#over-time svg.lines');
  if ((await charts.count()) < 2) return 'over time has fewer than two time charts';
  const ticks = (i) => charts.nth(i).locator('text.xtick').allTextContents();
  const before = [await ticks(0), await ticks(1)];
  const chart = charts.first();
  await chart.scrollIntoViewIfNeeded();
  const box = await chart.boundingBox();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5, { steps: 4 });
  await page.mouse.up();
  const zoomed = [await ticks(0), await ticks(1)];
  if (String(zoomed[0]) === String(before[0])) return `a drag did not zoom (ticks ${before[0]})`;
  if (String(zoomed[1]) !== String(zoomed[0])) return `the section's charts did not zoom together (${zoomed})`;
  await chart.dblclick({ position: { x: box.width * 0.5, y: box.height * 0.5 } });
  if (String(await ticks(0)) !== String(before[0])) return 'a double-click did not reset the zoom';
  const item = chart.locator('.key-item').first();
  await item.click();
  const hidden = await chart.locator('.series.hidden').count();
  await item.click();
  if (hidden !== 1 || (await chart.locator('.series.hidden').count()) !== 0) return 'a legend click did not toggle its series';
  return null;
}

if (failures.length) {
  for (const f of failures) console.error('report_check: ' + f);
  process.exit(1);
}
