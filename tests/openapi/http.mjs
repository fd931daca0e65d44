// A raw HTTP/1.1 client for contract.mjs: one request per connection (Connection: close), the
// bytes exactly as given (a Content-Length that promises more than is sent, a request line of
// another version, an oversized header: the probes for 413, 505, 501 and 431 need that), an
// optional source address (127.0.0.2: another client for the server's per-address limits), and
// the answer read until the peer closes or its Content-Length (or last chunk) is in. Bounded by a
// timeout; a connection the server closes early (413) still yields the answer read so far.
import net from 'node:net';

// {status, reason, headers: {lower-case name: value (repeats joined by ", ")}, rawHeaders: [[n, v]],
//  body: string} or throws (refused, timed out, no HTTP answer).
export function rawRequest({ host, port, bytes, localAddress, timeoutMs = 10000 }) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let settled = false;
    const sock = net.connect({ host, port, localAddress });
    const finish = (err) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      const data = Buffer.concat(chunks);
      const parsed = parseAnswer(data);
      if (parsed && parsed.complete) return resolve(parsed);
      if (parsed && err === null) return resolve(parsed); // closed: the body is what came
      if (parsed && err && err.code !== 'ETIMEDOUT_LOCAL') return resolve(parsed);
      reject(err || new Error(`no HTTP answer (${data.length} bytes)`));
    };
    const timer = setTimeout(() => {
      const e = new Error(`no complete answer within ${timeoutMs} ms`);
      e.code = 'ETIMEDOUT_LOCAL';
      finish(e);
    }, timeoutMs);
    sock.on('connect', () => {
      // The server may answer early (413) and close: a write error is not the end.
      sock.write(bytes, () => {});
    });
    sock.on('data', (d) => {
      chunks.push(d);
      const parsed = parseAnswer(Buffer.concat(chunks));
      if (parsed && parsed.complete) finish(null);
    });
    sock.on('end', () => finish(null));
    sock.on('close', () => finish(null));
    sock.on('error', (e) => {
      if (chunks.length > 0) finish(null);
      else finish(e);
    });
  });
}

// The request bytes: method, target, headers ([[name, value]]), body (string or Buffer).
// Content-Length is added for a body (and for POST, PUT and PATCH without one) unless the
// headers name one or Transfer-Encoding; `version` replaces "HTTP/1.1".
export function requestBytes({ method, target, host, headers = [], body, version = 'HTTP/1.1' }) {
  const b = body === undefined || body === null ? Buffer.alloc(0) : Buffer.from(body);
  let head = `${method} ${target} ${version}\r\nHost: ${host}\r\nConnection: close\r\n`;
  const names = headers.map(([n]) => n.toLowerCase());
  for (const [n, v] of headers) head += `${n}: ${v}\r\n`;
  if (!names.includes('content-length') && !names.includes('transfer-encoding') &&
      (b.length > 0 || ['POST', 'PUT', 'PATCH'].includes(method))) {
    head += `Content-Length: ${b.length}\r\n`;
  }
  head += '\r\n';
  return Buffer.concat([Buffer.from(head, 'latin1'), b]);
}

// Parses what came so far: null before the head is complete.
function parseAnswer(data) {
  const end = data.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const head = data.subarray(0, end).toString('latin1');
  const lines = head.split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(lines[0]);
  if (!m) return null;
  const headers = {};
  const rawHeaders = [];
  for (const l of lines.slice(1)) {
    const c = l.indexOf(':');
    if (c <= 0) continue;
    const n = l.slice(0, c).trim();
    const v = l.slice(c + 1).trim();
    rawHeaders.push([n, v]);
    const k = n.toLowerCase();
    headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
  }
  const rest = data.subarray(end + 4);
  const status = Number(m[1]);
  let body = rest;
  let complete = false;
  if ('content-length' in headers) {
    const n = Number(headers['content-length']);
    complete = rest.length >= n;
    body = rest.subarray(0, n);
  } else if (/chunked/i.test(headers['transfer-encoding'] || '')) {
    const out = [];
    let off = 0;
    for (;;) {
      const le = rest.indexOf('\r\n', off);
      if (le < 0) break;
      const size = parseInt(rest.subarray(off, le).toString('latin1'), 16);
      if (Number.isNaN(size)) break;
      if (size === 0) {
        complete = true;
        break;
      }
      if (rest.length < le + 2 + size + 2) break;
      out.push(rest.subarray(le + 2, le + 2 + size));
      off = le + 2 + size + 2;
    }
    body = Buffer.concat(out);
  } else if (status === 204 || status === 304 || (status >= 100 && status < 200)) {
    complete = true;
    body = Buffer.alloc(0);
  }
  return { status, reason: m[2] || '', headers, rawHeaders, body: body.toString('utf8'), complete };
}
