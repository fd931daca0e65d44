// TypeScript types from docs/openapi.yaml, and a client that must compile against them:
// openapi-typescript writes OUTDIR/ringcast-api.d.ts, then `tsc --noEmit --strict` compiles
// tests/openapi/sdk-seed.ts (copied beside it) with those types. Fails (exit 1, tsc's
// diagnostics on stdout) when the types do not compile or a path, status or field the seed uses
// is not in the document any more.
//
// Usage: node tests/openapi/types.mjs DOC OUTDIR
// Environment: RINGCAST_OPENAPI_NODE_DIR, where tests/openapi/setup.sh installed the packages.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { importPackage, loadDoc, needPath } from './lib.mjs';

const [docPath, outDir] = process.argv.slice(2);
if (!docPath || !outDir || process.argv.length !== 4) {
  process.stderr.write('usage: node types.mjs DOC OUTDIR\n');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
fs.mkdirSync(outDir, { recursive: true });

const openapiTS = await importPackage('openapi-typescript');
let dts;
try {
  const ast = await openapiTS.default(loadDoc(docPath));
  dts = openapiTS.astToString(ast);
} catch (e) {
  process.stderr.write(`openapi-typescript cannot make types of ${docPath}: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
}
const typesFile = path.join(outDir, 'ringcast-api.d.ts');
fs.writeFileSync(typesFile,
  `// Made by tests/openapi/types.mjs (openapi-typescript) from ${docPath}; do not edit.\n${dts}`);
fs.copyFileSync(path.join(here, 'sdk-seed.ts'), path.join(outDir, 'sdk-seed.ts'));
// No @types from anywhere: fetch and the rest come from the DOM library.
fs.writeFileSync(path.join(outDir, 'tsconfig.json'), `${JSON.stringify({
  compilerOptions: {
    strict: true,
    noEmit: true,
    target: 'ES2022',
    module: 'ESNext',
    moduleResolution: 'Bundler',
    lib: ['ES2022', 'DOM'],
    types: [],
    noUnusedLocals: true,
    noFallthroughCasesInSwitch: true,
    exactOptionalPropertyTypes: false,
  },
  files: ['ringcast-api.d.ts', 'sdk-seed.ts'],
}, null, 2)}\n`);

const tsc = path.join(path.dirname(needPath('typescript/package.json')), 'bin', 'tsc');
const r = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--pretty', 'false', '-p', path.join(outDir, 'tsconfig.json')], {
  encoding: 'utf8',
});
process.stdout.write(r.stdout || '');
process.stderr.write(r.stderr || '');
if (r.status !== 0) {
  process.stdout.write(`types: tsc --noEmit --strict failed on ${path.join(outDir, 'sdk-seed.ts')} against ${typesFile}\n`);
  process.exit(1);
}
process.stdout.write(`types: ${typesFile} (${dts.split('\n').length} lines) compiles with the client seed under tsc --strict\n`);
