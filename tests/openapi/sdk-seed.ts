// The seed of a typed ringcast client over ringcast-api.d.ts, the types openapi-typescript makes
// from docs/openapi.yaml. tests/openapi/types.mjs writes those types beside a copy of this file
// and compiles both with `tsc --noEmit --strict`; nothing runs. What this code uses is what a
// client relies on — the routes' paths, their success statuses, the request fields it sends and
// the answer fields it reads, and their types — so when one of them leaves the document or
// changes type, this stops compiling and CI fails (for instance "message_id" of the event
// intake's 202, docs/operations.md "Events", Message ids).
import type { paths } from "./ringcast-api";

// The application/json body of a response or a request body.
type JsonOf<R> = R extends { content: { "application/json": infer B } } ? B : never;

type EventsRoute = paths["/v1/tenants/{t}/events"]["post"];
type EndpointsRoute = paths["/v1/tenants/{t}/endpoints"]["post"];
type DeliveryRoute = paths["/v1/tenants/{t}/deliveries/{id}"]["get"];
type ResendRoute = paths["/v1/tenants/{t}/deliveries/{id}/resend"]["post"];

export type EventSubmit = JsonOf<EventsRoute["requestBody"]>;
export type SubmitAccepted = JsonOf<EventsRoute["responses"][202]>;
export type SubmitRepeated = JsonOf<EventsRoute["responses"][200]>;
export type EndpointCreate = JsonOf<NonNullable<EndpointsRoute["requestBody"]>>;
export type EndpointCreated = JsonOf<EndpointsRoute["responses"][201]>;
export type DeliveryDetail = JsonOf<DeliveryRoute["responses"][200]>;
// Every error has one shape (docs/operations.md §1 "Errors").
export type ApiError = JsonOf<EventsRoute["responses"][409]>;

export interface Client {
  baseUrl: string; // "http://127.0.0.1:8080"
  token: string; // the admin token or a tenant key (rck_...)
  fetch?: typeof fetch;
}

// A refusal: the status and the error's code and field.
export class ApiFailure extends Error {
  readonly status: number;
  readonly code: string;
  readonly field: string | undefined;
  constructor(status: number, body: ApiError) {
    super(`${status} ${body.error.code}: ${body.error.message}`);
    this.status = status;
    this.code = body.error.code;
    this.field = body.error.field;
  }
}

async function call(
  c: Client,
  method: "GET" | "POST",
  path: string,
  body?: unknown,
): Promise<{ status: number; json: unknown }> {
  const f = c.fetch ?? fetch;
  const init: RequestInit = { method, headers: { Authorization: `Bearer ${c.token}` } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { Authorization: `Bearer ${c.token}`, "Content-Type": "application/json" };
  }
  const r = await f(`${c.baseUrl}${path}`, init);
  const text = await r.text();
  return { status: r.status, json: text === "" ? undefined : (JSON.parse(text) as unknown) };
}

const tenantPath = (tenant: string): string => `/v1/tenants/${encodeURIComponent(tenant)}`;

export interface Submitted {
  status: 200 | 202; // 202 the first time, 200 for a repeat (SPEC R12.5)
  eventId: string; // the producer's id
  messageId: string; // the webhook id receivers deduplicate by (SPEC R11.3)
  deliveries: number;
  queued: boolean; // cluster mode: a non-owner took it, its owner fans it out
}

// POST /v1/tenants/{t}/events.
export async function submitEvent(c: Client, tenant: string, event: EventSubmit): Promise<Submitted> {
  const r = await call(c, "POST", `${tenantPath(tenant)}/events`, event);
  if (r.status === 202 || r.status === 200) {
    const b: SubmitAccepted | SubmitRepeated = r.json as SubmitAccepted;
    return {
      status: r.status,
      eventId: b.event_id,
      messageId: b.message_id,
      deliveries: b.deliveries,
      queued: b.queued === true,
    };
  }
  throw new ApiFailure(r.status, r.json as ApiError);
}

export interface CreatedEndpoint {
  id: string;
  secret: string; // shown this once (create and rotate): the types make it required
  state: EndpointCreated["state"];
}

// POST /v1/tenants/{t}/endpoints.
export async function createEndpoint(c: Client, tenant: string, spec: EndpointCreate): Promise<CreatedEndpoint> {
  const r = await call(c, "POST", `${tenantPath(tenant)}/endpoints`, spec);
  if (r.status !== 201) throw new ApiFailure(r.status, r.json as ApiError);
  const e = r.json as EndpointCreated;
  return { id: e.id, secret: e.secret, state: e.state };
}

export interface DeliverySummary {
  status: DeliveryDetail["delivery"]["status"];
  attempts: number;
  lastHttpStatus: number | null; // of the latest attempt (null: none, or no response)
}

// GET /v1/tenants/{t}/deliveries/{id}: the delivery and its history, attempts first.
export async function getDelivery(c: Client, tenant: string, id: string): Promise<DeliverySummary> {
  const r = await call(c, "GET", `${tenantPath(tenant)}/deliveries/${encodeURIComponent(id)}`);
  if (r.status !== 200) throw new ApiFailure(r.status, r.json as ApiError);
  const d = r.json as DeliveryDetail;
  let last: number | null = null;
  let attempts = 0;
  for (const rec of d.attempts) {
    if (rec.kind === "attempt") {
      attempts += 1;
      last = rec.http_status;
    }
  }
  return { status: d.delivery.status, attempts, lastHttpStatus: last };
}

// POST /v1/tenants/{t}/deliveries/{id}/resend (202): the delivery reopened.
export async function resendDelivery(c: Client, tenant: string, id: string, note?: string): Promise<string> {
  const body: JsonOf<NonNullable<ResendRoute["requestBody"]>> | undefined = note === undefined ? undefined : { note };
  const r = await call(c, "POST", `${tenantPath(tenant)}/deliveries/${encodeURIComponent(id)}/resend`, body);
  if (r.status !== 202) throw new ApiFailure(r.status, r.json as ApiError);
  return (r.json as JsonOf<ResendRoute["responses"][202]>).delivery.status;
}

// What a producer writes: the request fields, checked by the compiler against the document.
export async function example(c: Client): Promise<void> {
  const ep = await createEndpoint(c, "acme", {
    url: "https://hooks.example.com/orders",
    event_types: ["order.*"],
    policy: "smengo",
    signature: "standard",
    rate_limit: { per_second: 50, burst: 100 },
    headers: { "X-Shop": "acme" },
    idempotency_key: true,
    on_unknown: "reconcile",
    status_url: "https://hooks.example.com/orders/{webhook_id}/status",
    ordering: "per_key",
    on_head_failure: "block",
    supersede: false,
  });
  const sent = await submitEvent(c, "acme", {
    id: "evt_1",
    type: "order.created",
    payload: { order: 42 },
    ordering_key: "order-42",
  });
  const ids: string[] = [ep.id, sent.eventId, sent.messageId];
  void ids;
}
