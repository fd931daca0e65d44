#include "api/forward.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

#include "api/read_pool.h"
#include "net/system_clock.h"

namespace ringcast::api {

namespace {

constexpr std::string_view kNotOwnerPrefix = R"({"error":{"code":"not_owner")";

HttpResponse unavailable(std::string_view code, const std::string& message) {
  HttpResponse r = HttpResponse::error(503, code, message);
  r.headers.push_back({"Retry-After", "1"});
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Requests and answers

bool forwardable_route(const std::vector<std::string>& segs) {
  if (segs.size() < 4 || segs[0] != "v1" || segs[1] != "tenants") return false;
  return !(segs.size() == 4 && segs[3] == "events");  // intake: the inbox's, not ours
}

bool is_not_owner(const HttpResponse& r) {
  return r.status == 503 &&
         std::string_view(r.body).substr(0, kNotOwnerPrefix.size()) == kNotOwnerPrefix;
}

std::string forward_request_bytes(const HttpRequest& req, std::string_view host,
                                  std::string_view origin, const SignedHeaders& signed_headers) {
  std::string out;
  out.reserve(256 + req.target.size() + req.body.size());
  out += req.method;
  out += ' ';
  out += req.target;
  out += " HTTP/1.1\r\nHost: ";
  out += host;
  out += "\r\n";
  // Only what the owner needs to answer as it would answer the client: who the caller is (the
  // principal this node authenticated, signed) and the body's type. No credential (SPEC R14).
  if (const std::string* ct = req.header("content-type")) {
    out += "Content-Type: ";
    out += *ct;
    out += "\r\n";
  }
  out += "X-Ringcast-Forwarded: ";
  out += origin;
  out += "\r\nX-Ringcast-Principal: ";
  out += signed_headers.principal;
  out += "\r\nX-Ringcast-Signature: ";
  out += signed_headers.signature;
  out += "\r\nContent-Length: ";
  out += std::to_string(req.body.size());
  out += "\r\nConnection: close\r\n\r\n";
  out += req.body;
  return out;
}

Result<ExchangeReply> http_exchange(const ApiAddress& to, std::string_view request,
                                    SteadyTime deadline, size_t max_response_bytes, SSL_CTX* tls) {
  // TLS (an https:// advertise URL): verified against the cluster's CA and the owner's IP.
  const net::BlockingTls verify{tls, {}};
  return net::blocking_exchange(to_string(to.ip), to.port, to.tls ? &verify : nullptr, request,
                                deadline, max_response_bytes);
}

// ---------------------------------------------------------------------------------------------
// Forwarder

const char* Forwarder::outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kAnswered:
      return "answered";
    case Outcome::kNoOwner:
      return "no_owner";
    case Outcome::kLookupFailed:
      return "lookup_failed";
    case Outcome::kNoAddress:
      return "no_address";
    case Outcome::kUnreachable:
      return "unreachable";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kOverloaded:
      return "overloaded";
    case Outcome::kCount:
      break;
  }
  return "unknown";
}

std::shared_ptr<Forwarder> Forwarder::create(ForwardOptions options) {
  return std::shared_ptr<Forwarder>(new Forwarder(std::move(options)));
}

Forwarder::Forwarder(ForwardOptions options)
    : options_(std::move(options)),
      auth_(std::make_unique<ForwardAuth>(options_.secret, options_.signature_window)) {
  // An https:// owner is verified against this CA (cluster.ca_file), else the system's.
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx != nullptr) {
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    const std::string& ca = options_.ca_file.empty()
                                ? std::string("/etc/ssl/certs/ca-certificates.crt")
                                : options_.ca_file;
    if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) ERR_clear_error();
    tls_ctx_.reset(ctx);
  }
  ReadPoolOptions po;
  po.threads = std::max<uint32_t>(1, options_.max_forwards);
  po.max_queued = po.threads;
  po.name = "rc-fwd";
  pool_ = std::make_unique<ReadPool>(po);
}

void Forwarder::SslCtxFree::operator()(SSL_CTX* c) const {
  SSL_CTX_free(c);
}

Forwarder::~Forwarder() {
  stop();
}

void Forwarder::stop() {
  pool_->stop();
}

Responder Forwarder::wrap(std::shared_ptr<const HttpRequest> req, Partition p, Principal who,
                          Responder client) {
  auto held = std::make_shared<Responder>(std::move(client));
  return Responder::from_function([self = shared_from_this(), req = std::move(req), p,
                                   who = std::move(who), held](HttpResponse r) mutable {
    if (!is_not_owner(r)) return held->send(std::move(r));
    self->start(std::move(req), p, std::move(who), std::move(r), std::move(*held));
  });
}

void Forwarder::start(std::shared_ptr<const HttpRequest> req, Partition p, Principal who,
                      HttpResponse not_owner, Responder client) {
  const SteadyTime deadline = std::chrono::steady_clock::now() + options_.timeout;
  // The job owns the request and the not_owner answer (the answer when nobody owns p).
  auto work = [this, req = std::move(req), p, who = std::move(who),
               not_owner = std::move(not_owner),
               deadline]() mutable { return run(*req, p, who, std::move(not_owner), deadline); };
  switch (pool_->submit(std::move(work), client)) {
    case ReadPool::Submit::kQueued:
      return;
    case ReadPool::Submit::kFull:
      note(Outcome::kOverloaded);
      return client.send(unavailable(
          "overloaded", "too many calls are being forwarded to their owners; retry in a moment"));
    case ReadPool::Submit::kStopped:
      return client.send(ReadPool::stopped_response());
  }
}

HttpResponse Forwarder::run(const HttpRequest& req, Partition p, const Principal& who_called,
                            HttpResponse not_owner, SteadyTime deadline) {
  const auto t0 = std::chrono::steady_clock::now();
  in_flight_.fetch_add(1);
  struct Done {
    Forwarder* f;
    std::chrono::steady_clock::time_point t0;
    ~Done() {
      f->in_flight_.fetch_sub(1);
      f->micros_total_.fetch_add(
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                    std::chrono::steady_clock::now() - t0)
                                    .count()));
    }
  } done{this, t0};
  auto timed_out = [&](const std::string& who) {
    note(Outcome::kTimeout);
    return unavailable("owner_unreachable", who + " did not answer within " +
                                                std::to_string(to_ms(options_.timeout)) +
                                                " ms; retry in a moment");
  };
  if (t0 >= deadline) return timed_out("the owner of this tenant's partition");
  const Duration wait = std::chrono::duration_cast<Duration>(deadline - t0);
  Result<ForwardTarget> owner = options_.find_owner(p, wait);
  if (!owner.ok()) {
    note(Outcome::kLookupFailed);
    return not_owner;
  }
  if (owner->node_id.empty() || owner->node_id == options_.node_id) {
    note(Outcome::kNoOwner);  // between owners, or this node holds it while handing it over
    return not_owner;
  }
  const std::string who = "node " + owner->node_id;
  auto addr = cluster::parse_advertise_url(owner->url);
  if (!addr) {
    note(Outcome::kNoAddress);
    return unavailable("owner_unreachable",
                       "the owner of this tenant's partition, " + who +
                           ", has published no address (cluster.advertise_url) yet" +
                           (owner->url.empty() ? "" : ": \"" + owner->url + "\" is not one"));
  }
  const size_t scheme = addr->tls ? 8 : 7;
  const std::string host =
      owner->url.substr(scheme, owner->url.size() - scheme - (owner->url.back() == '/' ? 1 : 0));
  const SignedHeaders signed_headers =
      auth_->sign(who_called, options_.node_id, req.method, req.target, req.body,
                  net::SystemClock().wall_now());
  auto reply =
      http_exchange(*addr, forward_request_bytes(req, host, options_.node_id, signed_headers),
                    deadline, options_.max_response_bytes, tls_ctx_.get());
  if (!reply.ok()) {
    const Error& e = reply.error();
    if (std::string_view(e.reason_or_code()) == "timeout") return timed_out(who);
    note(Outcome::kUnreachable);
    std::string why = e.message;
    if (e.sys_errno != 0) why = std::strerror(e.sys_errno);
    return unavailable("owner_unreachable", "the owner of this tenant's partition, " + who +
                                                " at " + owner->url +
                                                ", cannot be reached: " + why);
  }
  note(Outcome::kAnswered);
  HttpResponse out;
  out.status = static_cast<uint16_t>(reply->status);
  out.body = std::move(reply->body);
  out.content_type.clear();
  for (const auto& h : reply->headers) {
    if (h.name == "content-type") {
      out.content_type = h.value;
    } else if (h.name == "retry-after") {
      out.headers.push_back({"Retry-After", h.value});
    } else if (h.name == "allow") {
      out.headers.push_back({"Allow", h.value});
    } else if (h.name == "www-authenticate") {
      out.headers.push_back({"WWW-Authenticate", h.value});
    }
  }
  out.headers.push_back({std::string(kServedByHeader), owner->node_id});
  return out;
}

std::string Forwarder::metrics_text() const {
  std::string out =
      "# HELP ringcast_api_forwards_total Calls this node did not own, sent on to the "
      "partition's owner, by outcome.\n# TYPE ringcast_api_forwards_total counter\n";
  for (size_t i = 0; i < static_cast<size_t>(Outcome::kCount); ++i) {
    out += "ringcast_api_forwards_total{outcome=\"";
    out += outcome_name(static_cast<Outcome>(i));
    out += "\"} ";
    out += std::to_string(outcomes_[i].load());
    out += '\n';
  }
  out +=
      "# HELP ringcast_api_forwards_in_flight Forwarded calls waiting for their owner's "
      "answer.\n# TYPE ringcast_api_forwards_in_flight gauge\nringcast_api_forwards_in_flight " +
      std::to_string(std::max<int64_t>(0, in_flight_.load())) + "\n";
  char secs[64];
  std::snprintf(secs, sizeof secs, "%.6f", static_cast<double>(micros_total_.load()) / 1e6);
  out +=
      "# HELP ringcast_api_forward_seconds_total Time spent on forwarded calls (lookup and "
      "exchange).\n# TYPE ringcast_api_forward_seconds_total counter\n"
      "ringcast_api_forward_seconds_total ";
  out += secs;
  out +=
      "\n# HELP ringcast_api_forwarded_received_total Calls other nodes forwarded to this "
      "one.\n# TYPE ringcast_api_forwarded_received_total counter\n"
      "ringcast_api_forwarded_received_total " +
      std::to_string(received_.load()) + "\n";
  return out;
}

}  // namespace ringcast::api
