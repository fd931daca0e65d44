// What lint.mjs, types.mjs and contract.mjs share: the npm packages (from the directory
// tests/openapi/setup.sh installed them into, outside the source tree), the document read from
// YAML or JSON, its operations and responses with their $refs followed, and an Ajv for JSON
// Schema 2020-12 (OpenAPI 3.1's dialect) that knows the document's components, so a response
// schema's "#/components/schemas/..." references resolve.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

// RINGCAST_OPENAPI_NODE_DIR (tools/test.sh and tests/e2e/openapi_test.cc: <build>/openapi-node);
// else this folder (after `npm ci` here by hand).
export function nodeDir() {
  const d = process.env.RINGCAST_OPENAPI_NODE_DIR;
  return path.resolve(d && d !== '' ? d : here);
}

// An npm package from nodeDir(), or an exit naming the command that installs it.
export function need(name) {
  const dir = nodeDir();
  try {
    return createRequire(path.join(dir, 'package.json'))(name);
  } catch (e) {
    if (e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(name)) {
      process.stderr.write(
        `npm package ${name} is not installed in ${dir}: run bash tests/openapi/setup.sh ${dir}\n`);
      process.exit(2);
    }
    throw e;
  }
}

// An npm package from nodeDir() through its ES module entry (exports "." import), for packages
// whose CommonJS build needs require() of an ES module, which Node.js 18 cannot do
// (openapi-typescript).
export async function importPackage(name) {
  let pkgFile;
  try {
    pkgFile = needPath(`${name}/package.json`);
  } catch {
    need(name); // exits naming the setup command
  }
  const pkg = JSON.parse(fs.readFileSync(pkgFile, 'utf8'));
  const dot = pkg.exports && (typeof pkg.exports === 'string' ? pkg.exports : pkg.exports['.']);
  const entry = (dot && (typeof dot === 'string' ? dot : dot.import || dot.default)) || pkg.module || pkg.main;
  return import(pathToFileURL(path.join(path.dirname(pkgFile), entry)).href);
}

// The path of a file of an npm package in nodeDir() ("typescript/package.json").
export function needPath(name) {
  return createRequire(path.join(nodeDir(), 'package.json')).resolve(name);
}

export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

// The document as a plain JSON value. YAML is read with the YAML 1.2 core schema (what a JSON
// rendering of it holds: no timestamps, no YAML 1.1 booleans); a duplicate key is an error.
export function loadDoc(file) {
  const text = fs.readFileSync(file, 'utf8');
  if (file.endsWith('.json')) return JSON.parse(text);
  const yaml = need('js-yaml');
  return yaml.load(text, { filename: file, schema: yaml.CORE_SCHEMA });
}

// The same read as a YAML 1.1 reader (PyYAML's safe_load, say) would do it: a plain yes, no, on,
// off, y or n is a boolean there, and an unquoted date a timestamp. lint compares the two readings
// so that whatever renders the document as JSON holds exactly this document.
export function loadDocAsYaml11(file) {
  const yaml = need('js-yaml');
  const bool11 = new yaml.Type('tag:yaml.org,2002:bool', {
    kind: 'scalar',
    resolve: (s) => /^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF|true|True|TRUE|false|False|FALSE)$/.test(s),
    construct: (s) => /^(?:y|Y|yes|Yes|YES|on|On|ON|true|True|TRUE)$/.test(s),
  });
  const schema = yaml.CORE_SCHEMA.extend({ implicit: [bool11, yaml.types.timestamp] });
  return yaml.load(fs.readFileSync(file, 'utf8'), { filename: file, schema });
}

// JSON Pointer "#/a/b~1c" → the value in `doc` (undefined when there is none).
export function pointer(doc, ref) {
  if (!ref.startsWith('#')) return undefined;
  let v = doc;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const k = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (v === null || typeof v !== 'object' || !(k in v)) return undefined;
    v = v[k];
  }
  return v;
}

// Follows the $ref of a non-schema object (a response, parameter, request body, header, path
// item) until there is none; throws on a dangling or circular one.
export function deref(doc, obj) {
  const seen = new Set();
  while (obj && typeof obj === 'object' && typeof obj.$ref === 'string') {
    if (seen.has(obj.$ref)) throw new Error(`circular $ref ${obj.$ref}`);
    seen.add(obj.$ref);
    const next = pointer(doc, obj.$ref);
    if (next === undefined) throw new Error(`$ref ${obj.$ref} points at nothing`);
    obj = next;
  }
  return obj;
}

// Every operation: {method ("GET"), path ("/v1/tenants/{t}/events"), op, item, key ("GET path")}.
export function operations(doc) {
  const out = [];
  for (const [p, rawItem] of Object.entries(doc.paths || {})) {
    const item = deref(doc, rawItem);
    for (const m of HTTP_METHODS) {
      if (item && item[m]) {
        out.push({ method: m.toUpperCase(), path: p, op: item[m], item, key: `${m.toUpperCase()} ${p}` });
      }
    }
  }
  return out;
}

// A path template as a matcher: literal segments must be equal, "{x}" matches one segment.
export function templateMatcher(template) {
  const segs = template.split('/').slice(1);
  const literals = segs.filter((s) => !/^\{[^}]*\}$/.test(s)).length;
  return {
    literals,
    match(urlPath) {
      const got = urlPath.split('/').slice(1);
      if (got.length !== segs.length) return false;
      return segs.every((s, i) => /^\{[^}]*\}$/.test(s) || s === got[i]);
    },
  };
}

// Whether a media type carries JSON ("application/json", "application/problem+json").
export function isJsonMedia(mt) {
  const base = String(mt).split(';')[0].trim().toLowerCase();
  return base === 'application/json' || base.endsWith('+json');
}

// The effective security of an operation (its own, else the document's); [] = public.
export function effectiveSecurity(doc, op) {
  return op.security !== undefined ? op.security : doc.security || [];
}

// Keywords OpenAPI 3.1's dialect adds to JSON Schema 2020-12 (an annotation to a validator).
const OAS_KEYWORDS = ['discriminator', 'xml', 'externalDocs', 'example'];

// OpenAPI's format registry beyond ajv-formats: the numeric widths and the string annotations.
function addOasFormats(ajv) {
  ajv.addFormat('int32', {
    type: 'number',
    validate: (x) => Number.isInteger(x) && x >= -2147483648 && x <= 2147483647,
  });
  ajv.addFormat('int64', { type: 'number', validate: (x) => Number.isInteger(x) });
  ajv.addFormat('float', { type: 'number', validate: () => true });
  ajv.addFormat('double', { type: 'number', validate: () => true });
  ajv.addFormat('byte', /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/);
  ajv.addFormat('binary', true);
  ajv.addFormat('password', true);
}

// Every "x-..." key under a schema, so that a strict Ajv accepts those extensions.
function extensionKeywords(value, out = new Set()) {
  if (Array.isArray(value)) {
    for (const v of value) extensionKeywords(v, out);
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k.startsWith('x-')) out.add(k);
      extensionKeywords(v, out);
    }
  }
  return out;
}

const COMPONENTS_ID = 'urn:ringcast:openapi:components';
const COMPONENTS_REF = '#/components/schemas/';
const OAS_DIALECTS = new Set([
  'https://spec.openapis.org/oas/3.1/dialect/base',
  'https://spec.openapis.org/oas/3.1/dialect/2024-11-10',
]);

// A copy of a schema whose "#/components/schemas/..." refs point into the registered components
// and whose OpenAPI dialect "$schema" (Ajv knows only 2020-12's) is dropped.
function rewriteRefs(value) {
  if (Array.isArray(value)) return value.map(rewriteRefs);
  if (!value || typeof value !== 'object') return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    if (k === '$ref' && typeof v === 'string' && v.startsWith(COMPONENTS_REF)) {
      out[k] = `${COMPONENTS_ID}#/$defs/${v.slice(COMPONENTS_REF.length)}`;
    } else if (k === '$schema' && OAS_DIALECTS.has(v)) {
      continue;
    } else {
      out[k] = rewriteRefs(v);
    }
  }
  return out;
}

// An Ajv2020 with ajv-formats, OpenAPI's formats and keywords, and the document's
// components.schemas registered. strict: unknown keywords and formats are errors (lint);
// otherwise they are ignored (contract: lint reports them).
// Returns {ajv, compile(schema) → validate function (cached per schema object)}.
export function makeValidator(doc, { strict }) {
  const Ajv2020 = need('ajv/dist/2020').default || need('ajv/dist/2020');
  const addFormats = need('ajv-formats').default || need('ajv-formats');
  const ajv = new Ajv2020({
    allErrors: true,
    strict: strict ? true : false,
    strictTypes: false,
    strictTuples: false,
    strictRequired: false,
    validateFormats: true,
    logger: strict ? undefined : false,
  });
  addFormats(ajv);
  addOasFormats(ajv);
  ajv.addVocabulary(OAS_KEYWORDS);
  for (const k of extensionKeywords(doc)) ajv.addKeyword(k);
  const schemas = (doc.components && doc.components.schemas) || {};
  ajv.addSchema({ $id: COMPONENTS_ID, $defs: rewriteRefs(schemas) });
  const cache = new WeakMap();
  return {
    ajv,
    compile(schema) {
      if (schema && typeof schema === 'object') {
        const hit = cache.get(schema);
        if (hit) return hit;
      }
      const fn = ajv.compile(typeof schema === 'boolean' ? schema : rewriteRefs(schema));
      if (schema && typeof schema === 'object') cache.set(schema, fn);
      return fn;
    },
  };
}

// Ajv's errors as lines "<instancePath> <message> (<params>)".
export function ajvErrors(errors) {
  return (errors || []).map((e) => {
    const at = e.instancePath === '' ? '(body)' : e.instancePath;
    const params = e.params && Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : '';
    return `${at} ${e.message}${params} [${e.schemaPath}]`;
  });
}
