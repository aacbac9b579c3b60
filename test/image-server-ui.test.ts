import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { crc32, deflateSync } from 'node:zlib';
import type { Browser, Page } from 'playwright-core';
import { CHROMIUM_PATH, launchChromium } from './helpers/chromium.js';

const launcher = fileURLToPath(new URL('../examples/image-server/tests/launch_ui.py', import.meta.url));
const python = '/usr/bin/python3';
const screenshotPath = '/tmp/image-server-ui.png';

interface RunningUi {
  url: string;
  child: ChildProcess;
}

/** Starts ui.py's app around the seeded test pipeline; resolves once it prints its loopback address. */
function startUi(): Promise<RunningUi> {
  const child = spawn(python, [launcher, '--generation-delay', '0.4'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the page server did not start:\n${output}`)), 15_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve({ url: match[1], child });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the page server exited with ${code}:\n${output}`));
    });
  });
}

/** A solid-colour RGB PNG, encoded by hand so the test needs no image library. */
function solidPng(width: number, height: number, [red, green, blue]: [number, number, number]): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const checksum = Buffer.alloc(4);
    checksum.writeUInt32BE(crc32(body));
    return Buffer.concat([length, body, checksum]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  const row = Buffer.concat([Buffer.from([0]), Buffer.from(Array.from({ length: width }, () => [red, green, blue]).flat())]);
  const pixels = Buffer.concat(Array.from({ length: height }, () => row));
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(pixels)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

async function pixelAt(page: Page, x: number, y: number): Promise<number[]> {
  return page.$eval('#result-image', (image, [px, py]) => {
    const element = image as HTMLImageElement;
    const canvas = document.createElement('canvas');
    canvas.width = element.naturalWidth;
    canvas.height = element.naturalHeight;
    const context = canvas.getContext('2d')!;
    context.drawImage(element, 0, 0);
    return Array.from(context.getImageData(px, py, 1, 1).data.slice(0, 3));
  }, [x, y]);
}

async function resultAfter(page: Page, previousSrc: string | null): Promise<void> {
  await page.waitForFunction(
    (before) => {
      const image = document.querySelector<HTMLImageElement>('#result-image');
      return !!image && !image.hidden && image.src !== before && image.complete && image.naturalWidth > 0;
    },
    previousSrc,
    { timeout: 15_000 },
  );
}

describe('image server web page (headless Chromium)', function () {
  this.timeout(60_000);
  let ui: RunningUi;
  let browser: Browser;
  let page: Page;

  before(async () => {
    for (const needed of [CHROMIUM_PATH, python]) {
      if (!existsSync(needed)) throw new Error(`${needed} is missing: run scripts/install-image-server-deps.sh`);
    }
    ui = await startUi();
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    if (ui && ui.child.exitCode === null) {
      const exited = once(ui.child, 'exit');
      ui.child.kill('SIGTERM');
      await exited;
    }
  });

  beforeEach(async () => {
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(`${ui.url}/`);
    await page.waitForFunction(() => document.querySelector('#health')?.textContent === 'ready');
  });

  afterEach(async () => {
    await page.close();
  });

  it('fills the variant defaults from the server', async () => {
    expect(await page.textContent('#model')).to.equal('4B distilled · black-forest-labs/FLUX.2-klein-4B');
    expect(await page.inputValue('#width')).to.equal('1024');
    expect(await page.inputValue('#height')).to.equal('1024');
    expect(await page.inputValue('#steps')).to.equal('4');
    expect(await page.inputValue('#guidance')).to.equal('1');
    expect(await page.isDisabled('#steps')).to.equal(true);
    expect(await page.isVisible('#fixed')).to.equal(true);
  });

  it('generates from a typed prompt, shows progress, then the image with its seed, time and download', async () => {
    await page.fill('#prompt', 'a red fox in fresh snow, morning light');
    await page.fill('#width', '512');
    await page.fill('#height', '384');
    await page.fill('#seed', '1234');
    await page.click('#generate');
    await page.waitForFunction(() => document.querySelector('#generate')?.textContent?.startsWith('Generating'));
    expect(await page.isDisabled('#generate')).to.equal(true);
    await resultAfter(page, null);

    const size = await page.$eval('#result-image', (image) => [(image as HTMLImageElement).naturalWidth, (image as HTMLImageElement).naturalHeight]);
    expect(size).to.deep.equal([512, 384]);
    expect(await page.textContent('#result-seed')).to.equal('1234');
    expect(await page.textContent('#result-time')).to.match(/^\d+\.\d\d s$/);
    expect(await page.getAttribute('#download', 'download')).to.equal('flux2-klein-1234.png');
    expect(await page.getAttribute('#download', 'href')).to.match(/^blob:/);
    expect(await page.textContent('#generate')).to.equal('Generate');
    expect(await page.isVisible('#error')).to.equal(false);
    await page.screenshot({ path: screenshotPath, fullPage: true });
  });

  it('draws a random seed when the field is empty, and reuse brings the same image back', async () => {
    await page.fill('#prompt', 'a lighthouse');
    await page.fill('#width', '256');
    await page.fill('#height', '256');
    await page.click('#generate');
    await resultAfter(page, null);
    const seed = await page.textContent('#result-seed');
    expect(seed).to.match(/^\d+$/);
    const first = await pixelAt(page, 10, 10);
    const firstSrc = await page.getAttribute('#result-image', 'src');

    await page.click('#reuse-seed');
    expect(await page.inputValue('#seed')).to.equal(seed);
    await page.click('#generate');
    await resultAfter(page, firstSrc);
    expect(await page.textContent('#result-seed')).to.equal(seed);
    expect(await pixelAt(page, 10, 10)).to.deep.equal(first);
  });

  it('shows the server error for a width that is not a multiple of 16, beside the field', async () => {
    await page.fill('#prompt', 'a red fox');
    await page.fill('#width', '1000');
    await page.click('#generate');
    await page.waitForSelector('#error.shown');
    expect(await page.textContent('#error')).to.equal('width must be a multiple of 16, got 1000');
    expect(await page.getAttribute('#width', 'aria-invalid')).to.equal('true');
    expect(await page.isVisible('#result-image')).to.equal(false);
    expect(await page.isDisabled('#generate')).to.equal(false);

    await page.fill('#width', '1008');
    await page.fill('#prompt', '');
    await page.click('#generate');
    await page.waitForFunction(() => document.querySelector('#error')?.textContent === 'prompt must not be empty');
    expect(await page.getAttribute('#width', 'aria-invalid')).to.equal(null);
    expect(await page.getAttribute('#prompt', 'aria-invalid')).to.equal('true');
  });

  it('previews uploaded input images, removes one, and edits with the one left', async () => {
    await page.setInputFiles('#images', [
      { name: 'red.png', mimeType: 'image/png', buffer: solidPng(96, 96, [250, 10, 10]) },
      { name: 'blue.png', mimeType: 'image/png', buffer: solidPng(96, 96, [10, 10, 250]) },
    ]);
    await page.waitForFunction(() => document.querySelectorAll('#references .reference').length === 2);
    expect(await page.textContent('#mode')).to.equal('composing 2 images');

    await page.click('#references .reference:first-child button');
    expect(await page.locator('#references .reference').count()).to.equal(1);
    expect(await page.textContent('#mode')).to.equal('editing 1 image');
    expect(await page.getAttribute('#references img', 'alt')).to.equal('blue.png');

    await page.fill('#prompt', 'make it night');
    await page.fill('#width', '256');
    await page.fill('#height', '256');
    await page.click('#generate');
    await resultAfter(page, null);
    // The seeded test pipeline pastes each reference image along the bottom edge of its picture.
    expect(await pixelAt(page, 8, 250)).to.deep.equal([10, 10, 250]);
  });
});
