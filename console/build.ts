import { build } from 'esbuild';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { consoleBuildDir } from '../server/console-assets.js';

const entry = fileURLToPath(new URL('./src/main.tsx', import.meta.url));

/**
 * Bundles the console into `outDir`: its script, its chunks and its stylesheet under assets/ with a hash of their
 * content in their names (and each gzip-compressed beside it, `.gz`, for the server to send as it is), and index.html,
 * written last and at once, naming them; the files of earlier builds are removed. Nothing is loaded from anywhere else.
 */
export async function buildConsole(outDir = consoleBuildDir()): Promise<void> {
  const assets = join(outDir, 'assets');
  mkdirSync(assets, { recursive: true });
  const result = await build({
    entryPoints: { console: entry },
    bundle: true,
    minify: true,
    sourcemap: 'linked',
    format: 'esm',
    // Pages that need much code of their own (the apply page's YAML parser) load it when first opened.
    splitting: true,
    chunkNames: 'chunk-[hash]',
    target: ['es2020'],
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: assets,
    entryNames: '[name]-[hash]',
    metafile: true,
    legalComments: 'linked',
    logLevel: 'warning',
  });
  const outputs = Object.keys(result.metafile.outputs).map((path) => basename(path));
  const entryOutputs = Object.entries(result.metafile.outputs).filter(([, output]) => output.entryPoint).map(([path]) => basename(path));
  const script = entryOutputs.find((name) => name.endsWith('.js'));
  const style = outputs.find((name) => name.endsWith('.css'));
  if (!script || !style) throw new Error(`the console build made no script or no stylesheet: ${outputs.join(', ')}`);
  // The chunks the entry imports at once are fetched beside it, not after it has been read.
  const entryOutput = Object.entries(result.metafile.outputs).find(([path]) => basename(path) === script)![1];
  const preloads = entryOutput.imports.filter((imported) => imported.kind === 'import-statement')
    .map((imported) => `<link rel="modulepreload" href="/assets/${basename(imported.path)}">\n`).join('');
  const index = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>orchestrator</title>
<link rel="stylesheet" href="/assets/${style}">
${preloads}<script type="module" src="/assets/${script}"></script>
</head>
<body><div id="app"></div></body>
</html>
`;
  const compressed = outputs.filter((name) => /\.(js|css)$/.test(name)).map((name) => {
    writeFileSync(join(assets, `${name}.gz`), gzipSync(readFileSync(join(assets, name)), { level: 9 }));
    return `${name}.gz`;
  });
  const staging = join(outDir, `index.html.${process.pid}`);
  writeFileSync(staging, index);
  renameSync(staging, join(outDir, 'index.html'));
  for (const stale of readdirSync(assets).filter((name) => !outputs.includes(name) && !compressed.includes(name))) rmSync(join(assets, stale), { force: true });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf('--out');
  const outDir = at === -1 ? consoleBuildDir() : process.argv[at + 1];
  await buildConsole(outDir);
  process.stdout.write(`console built into ${outDir}\n`);
}
