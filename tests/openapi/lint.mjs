// Lints docs/openapi.yaml: the OpenAPI 3.1 validator (@apidevtools/swagger-parser, which checks
// the document against the 3.1 schema and resolves every $ref), then the house rules below.
// Prints each problem on a line of its own and exits 1 when there is one, 0 otherwise.
//
// Usage: node tests/openapi/lint.mjs DOC [--routes api/routes.cc] [--error-schema NAME]
//   DOC              docs/openapi.yaml (or the JSON the daemon serves)
//   --routes FILE    api/routes.cc: every route of its table must be an operation of DOC, and every
//                    /v1 operation of DOC a route of it (or GET /v1/openapi.json)
//   --error-schema   the shared error schema under components.schemas (default "Error")
// Environment: RINGCAST_OPENAPI_NODE_DIR, where tests/openapi/setup.sh installed the packages.
//
// House rules (each problem names the operation and the rule):
//   - every operation has a unique operationId and a summary;
//   - every response with a JSON body ("application/json", "...+json") has a schema for it;
//   - every 4xx and 5xx JSON body's schema is the shared error schema (a $ref to it, or an allOf
//     that holds one), and every 4xx and 5xx of a /v1 route has one: docs/operations.md §1
//     "Errors" gives every error one shape. Not bound: HEAD (no body), an HTML page (the owner
//     address confirmation), the health probes' own {"status"} answers;
//   - the shared error schema accepts {"error":{"code","message"[,"field"]}} and refuses {};
//   - every {name} of a path is a declared path parameter (required) and the other way round;
//   - an operation that needs credentials documents 401 (every /v1 route answers it, SPEC R14);
//     GET /v1/openapi.json needs none (security: []);
//   - every schema compiles under a strict Ajv 2020 (no unknown keyword, such as a 3.0
//     "nullable", no unknown format) and no "nullable" anywhere (3.1 says type: [..., "null"]);
//   - YAML that a YAML 1.1 reader would read otherwise (an unquoted date, a plain yes/no/on/off)
//     is refused: the JSON the daemon serves must be this document.
import fs from 'node:fs';
import {
  deref, effectiveSecurity, isJsonMedia, loadDoc, loadDocAsYaml11,
  makeValidator, need, operations,
} from './lib.mjs';

function usage() {
  process.stderr.write('usage: node lint.mjs DOC [--routes api/routes.cc] [--error-schema NAME]\n');
  process.exit(2);
}

const args = process.argv.slice(2);
let docPath = null;
let routesPath = null;
let errorSchema = 'Error';
for (let i = 0; i < args.length; ++i) {
  if (args[i] === '--routes' && i + 1 < args.length) routesPath = args[++i];
  else if (args[i] === '--error-schema' && i + 1 < args.length) errorSchema = args[++i];
  else if (!args[i].startsWith('--') && docPath === null) docPath = args[i];
  else usage();
}
if (docPath === null) usage();

const problems = [];
const problem = (where, rule, what) => problems.push(`${where}: ${rule}: ${what}`);

// 1. The validator. Its message is the answer when the document is not valid OpenAPI 3.1.
let doc;
try {
  doc = loadDoc(docPath);
} catch (e) {
  process.stderr.write(`${docPath}: cannot read: ${e.message}\n`);
  process.exit(1);
}
if (typeof doc !== 'object' || doc === null || !/^3\.1\.\d+$/.test(String(doc.openapi))) {
  process.stderr.write(`${docPath}: not an OpenAPI 3.1 document (openapi: ${doc && doc.openapi})\n`);
  process.exit(1);
}
const SwaggerParser = need('@apidevtools/swagger-parser');
try {
  // validate() dereferences its argument in place: give it a copy.
  await SwaggerParser.validate(structuredClone(doc));
} catch (e) {
  process.stderr.write(`${docPath}: the OpenAPI validator refuses it:\n${e.message}\n`);
  process.exit(1);
}

// 2. YAML read the same by a YAML 1.1 and a 1.2 reader.
if (!docPath.endsWith('.json')) {
  const loose = loadDocAsYaml11(docPath);
  const walk = (a, b, at) => {
    if (b instanceof Date) {
      problem(at || '/', 'plain JSON', `an unquoted date or time (${b.toISOString()}): quote it`);
    } else if (a && b && typeof a === 'object' && typeof b === 'object') {
      for (const k of Object.keys(a)) walk(a[k], b[k], `${at}/${k}`);
      for (const k of Object.keys(b)) {
        if (!(k in a)) problem(`${at}/${k}`, 'plain JSON', 'a key a YAML 1.1 reader reads otherwise (yes/no/on/off): quote it');
      }
    } else if (a !== b) {
      problem(at || '/', 'plain JSON', `a YAML 1.1 reader reads ${JSON.stringify(b)}, not ${JSON.stringify(a)}: quote it`);
    }
  };
  walk(doc, loose, '');
}

// 3. House rules per operation.
const ops = operations(doc);
const validator = makeValidator(doc, { strict: true });
const errorRef = `#/components/schemas/${errorSchema}`;
const schemas = (doc.components && doc.components.schemas) || {};
if (!(errorSchema in schemas)) {
  problem('components.schemas', 'error schema', `no ${errorSchema} (pass --error-schema NAME)`);
} else {
  try {
    const v = validator.compile({ $ref: errorRef });
    const ok = [
      { error: { code: 'invalid_type', message: 'url must be a string', field: 'url' } },
      { error: { code: 'unauthorized', message: 'missing bearer token' } },
    ];
    for (const sample of ok) {
      if (!v(sample)) {
        problem(errorRef, 'error schema', `refuses ${JSON.stringify(sample)}: ${JSON.stringify(v.errors)}`);
      }
    }
    if (v({})) problem(errorRef, 'error schema', 'accepts {}');
  } catch (e) {
    problem(errorRef, 'error schema', `does not compile: ${e.message}`);
  }
}

// The health probes answer their own {"status"} shape, 503 included (docs/operations.md §1
// "Route summary"): a load balancer reads them, not an API client.
const HEALTH_PROBES = ['/healthz', '/readyz'];

const usesErrorSchema = (schema) => {
  if (!schema || typeof schema !== 'object') return false;
  if (schema.$ref === errorRef) return true;
  return Array.isArray(schema.allOf) && schema.allOf.some((s) => s && s.$ref === errorRef);
};

const operationIds = new Map();
for (const { key, op, item, path: p, method } of ops) {
  if (typeof op.operationId !== 'string' || op.operationId === '') {
    problem(key, 'operationId', 'missing');
  } else if (operationIds.has(op.operationId)) {
    problem(key, 'operationId', `"${op.operationId}" is also ${operationIds.get(op.operationId)}'s`);
  } else {
    operationIds.set(op.operationId, key);
  }
  if (typeof op.summary !== 'string' || op.summary.trim() === '') problem(key, 'summary', 'missing');

  // Path parameters: the template's names, declared on the path item or the operation.
  const declared = new Map();
  for (const raw of [...(item.parameters || []), ...(op.parameters || [])]) {
    const prm = deref(doc, raw);
    if (prm && prm.in === 'path') declared.set(prm.name, prm);
  }
  const names = [...p.matchAll(/\{([^}]*)\}/g)].map((m) => m[1]);
  for (const n of names) {
    if (!declared.has(n)) problem(key, 'path parameters', `{${n}} is not declared (in: path)`);
    else if (declared.get(n).required !== true) problem(key, 'path parameters', `{${n}} must be required`);
  }
  for (const n of declared.keys()) {
    if (!names.includes(n)) problem(key, 'path parameters', `"${n}" is declared but not in the path`);
  }

  const responses = op.responses || {};
  if (Object.keys(responses).length === 0) problem(key, 'responses', 'none documented');
  const secured = effectiveSecurity(doc, op).length > 0;
  if (secured && !('401' in responses) && !('4XX' in responses)) {
    problem(key, 'responses', 'needs credentials but documents no 401');
  }
  if (p === '/v1/openapi.json' && op === item.get && secured) {
    problem(key, 'security', 'the document is public: security: []');
  }
  for (const [status, raw] of Object.entries(responses)) {
    let resp;
    try {
      resp = deref(doc, raw);
    } catch (e) {
      problem(`${key} ${status}`, 'responses', e.message);
      continue;
    }
    const content = resp.content || {};
    for (const [mt, media] of Object.entries(content)) {
      if (isJsonMedia(mt) && (!media || media.schema === undefined)) {
        problem(`${key} ${status}`, 'schema', `the ${mt} body has no schema`);
      }
      if (media && media.schema !== undefined) {
        try {
          validator.compile(media.schema);
        } catch (e) {
          problem(`${key} ${status} ${mt}`, 'strict schema', e.message);
        }
      }
    }
    if (/^[45]/.test(status) && method !== 'HEAD' && !HEALTH_PROBES.includes(p)) {
      const json = Object.entries(content).filter(([mt]) => isJsonMedia(mt));
      if (json.length === 0 && p.startsWith('/v1/')) {
        problem(`${key} ${status}`, 'error shape', 'no JSON body: every error has the shared error shape');
      }
      for (const [mt, media] of json) {
        if (!usesErrorSchema(media && media.schema)) {
          problem(`${key} ${status}`, 'error shape', `the ${mt} schema is not ${errorRef}`);
        }
      }
    }
  }
  const body = op.requestBody ? deref(doc, op.requestBody) : null;
  for (const [mt, media] of Object.entries((body && body.content) || {})) {
    if (media && media.schema !== undefined) {
      try {
        validator.compile(media.schema);
      } catch (e) {
        problem(`${key} request ${mt}`, 'strict schema', e.message);
      }
    }
  }
}

// Component schemas that no operation reaches compile too.
for (const name of Object.keys(schemas)) {
  try {
    validator.compile({ $ref: `#/components/schemas/${name}` });
  } catch (e) {
    problem(`#/components/schemas/${name}`, 'strict schema', e.message);
  }
}

// No 3.0 "nullable" anywhere under a schema.
const findNullable = (value, at) => {
  if (Array.isArray(value)) value.forEach((v, i) => findNullable(v, `${at}/${i}`));
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === 'nullable') problem(at, 'nullable', 'OpenAPI 3.1 writes type: [..., "null"]');
      findNullable(v, `${at}/${k}`);
    }
  }
};
findNullable(doc.paths, '#/paths');
findNullable(doc.components, '#/components');

// 4. The route table (api/routes.cc) against the document.
if (routesPath !== null) {
  const text = fs.readFileSync(routesPath, 'utf8');
  const routes = [...text.matchAll(/RouteSpec\{"([A-Z]+)",\s*"([^"]+)"/g)].map((m) => ({
    method: m[1],
    pattern: m[2],
  }));
  if (routes.length === 0) problem(routesPath, 'routes', 'no RouteSpec rows found');
  const shape = (p) => p.replace(/\{[^}]*\}/g, '{}');
  const docKeys = new Set(ops.map((o) => `${o.method} ${shape(o.path)}`));
  const routeKeys = new Set(routes.map((r) => `${r.method} ${shape(r.pattern)}`));
  for (const r of routes) {
    if (!docKeys.has(`${r.method} ${shape(r.pattern)}`)) {
      problem(`${r.method} ${r.pattern}`, 'routes', `a route of ${routesPath} that the document lacks`);
    }
  }
  for (const o of ops) {
    if (!o.path.startsWith('/v1/') || (o.method === 'GET' && o.path === '/v1/openapi.json')) continue;
    if (!routeKeys.has(`${o.method} ${shape(o.path)}`)) {
      problem(o.key, 'routes', `not a route of ${routesPath}: the daemon does not serve it`);
    }
  }
  if (!docKeys.has('GET /v1/openapi.json')) problem('GET /v1/openapi.json', 'routes', 'missing');
}

const total = ops.length;
if (problems.length > 0) {
  for (const p of problems) process.stdout.write(`${p}\n`);
  process.stdout.write(`lint: ${docPath}: ${problems.length} problem(s) in ${total} operations\n`);
  process.exit(1);
}
process.stdout.write(`lint: ${docPath}: valid OpenAPI ${doc.openapi}; ${total} operations keep the house rules\n`);
