// Opens ui.py's page in headless Chromium, generates one image as a person would (type a prompt, a
// size and a seed, press Generate) and prints what the page then shows, as one JSON line:
// {"model", "size": [width, height], "seed", "sha256"}: the size of the image shown and the sha256 of
// its pixels, as RGBA bytes row by row.
//   node page_generates.mjs URL PROMPT WIDTH HEIGHT SEED
// playwright-core comes from the repository's npm packages; Chromium from Debian.
import { createHash } from 'node:crypto';
import { chromium } from 'playwright-core';

function pixels(image) {
  const canvas = document.createElement('canvas');
  canvas.width = image.naturalWidth;
  canvas.height = image.naturalHeight;
  const context = canvas.getContext('2d');
  context.drawImage(image, 0, 0);
  return Array.from(context.getImageData(0, 0, canvas.width, canvas.height).data);
}

const [url, prompt, width, height, seed] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage();
  await page.goto(`${url}/`);
  await page.waitForFunction(() => document.querySelector('#health')?.textContent === 'ready', null, { timeout: 60_000 });
  await page.fill('#prompt', prompt);
  await page.fill('#width', width);
  await page.fill('#height', height);
  await page.fill('#seed', seed);
  await page.click('#generate');
  await page.waitForFunction(() => {
    const image = document.querySelector('#result-image');
    return !!image && !image.hidden && image.complete && image.naturalWidth > 0;
  }, null, { timeout: 120_000 });
  console.log(JSON.stringify({
    model: await page.textContent('#model'),
    size: await page.$eval('#result-image', (image) => [image.naturalWidth, image.naturalHeight]),
    seed: await page.textContent('#result-seed'),
    sha256: createHash('sha256').update(Buffer.from(await page.$eval('#result-image', pixels))).digest('hex'),
  }));
} finally {
  await browser.close();
}
