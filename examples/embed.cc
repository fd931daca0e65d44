// Embedding ringcast in your own process with the public Engine API (core/engine.h): open a
// store, start the engine, register an endpoint for a tenant, submit events, wait for their
// delivery, read the delivery log, stop. Run it with no arguments: it starts its own receiver
// on 127.0.0.1 and exits 0 when every event arrived with a valid signature.
//
//   ringcast-embed-example [--data-dir DIR] [--url http://127.0.0.1:PORT/PATH]
//
// --data-dir keeps the store (default: a temp dir, removed at exit); run twice with the same
// dir and the events come back as duplicates (SPEC R12.5). --url sends to an external
// receiver (e.g. `ringcast-sink`) instead of the built-in one; it must be on 127.0.0.0/8.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "engine/build.h"
#include "engine/config.h"
#include "engine/embedded.h"
#include "engine/engine_impl.h"
#include "examples/loopback_receiver.h"
#include "net/signing.h"
#include "storage/rocks_store.h"

using namespace ringcast;

namespace {

// Engine calls complete on the owning shard's thread, never inline. The caller (here: main)
// waits on a future; the callback only fulfils the promise. Never block or call back into the
// engine and wait inside a callback: that would stall the shard that must answer.
template <class T, class Call>
Result<T> await(Call call) {
  auto promise = std::make_shared<std::promise<Result<T>>>();
  std::future<Result<T>> answer = promise->get_future();
  call([promise](Result<T> r) { promise->set_value(std::move(r)); });
  return answer.get();
}

const char* kind_name(SubmitResult::Kind k) {
  return k == SubmitResult::Kind::kAccepted ? "accepted" : "duplicate";
}

int fail(const char* what, const Error& e) {
  std::fprintf(stderr, "embed: %s: %s (%s)\n", what, e.message, e.reason_or_code());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir, external_url;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data-dir" && i + 1 < argc) {
      data_dir = argv[++i];
    } else if (a == "--url" && i + 1 < argc) {
      external_url = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--data-dir DIR] [--url URL]\n", argv[0]);
      return 2;
    }
  }
  // Declared first, so it is removed last: after the engine and the store have closed.
  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() {
      if (!path.empty()) std::filesystem::remove_all(path);
    }
  } temp_dir;
  if (data_dir.empty()) {
    std::string tmpl = std::filesystem::temp_directory_path() / "ringcast-embed-XXXXXX";
    if (!mkdtemp(tmpl.data())) return std::perror("embed: mkdtemp"), 1;
    data_dir = temp_dir.path = tmpl;
  }
  // As the daemon does: a receiver that closes mid-request must not kill the process.
  signal(SIGPIPE, SIG_IGN);

  // The customer's side. The platform gives each endpoint a secret; here we choose it, so that
  // the receiver can check the Standard Webhooks signature (SPEC R11.2) of every request.
  const std::string secret = "whsec_" + net::base64_encode("embed-example-secret-32-bytes!!!");
  std::atomic<int> verified{0}, rejected{0};
  std::optional<examples::LoopbackReceiver> receiver;
  if (external_url.empty()) {
    receiver.emplace([&, key = *net::decode_secret(secret)](const examples::ReceivedRequest& r) {
      bool ok = net::verify_standard(r.header("webhook-signature"), {key}, r.header("webhook-id"),
                                     r.header("webhook-timestamp"), r.body);
      (ok ? verified : rejected).fetch_add(1);
      return ok ? 200 : 401;
    });
  }

  // 1. Configuration: the daemon's defaults, with the few changes a loopback demo needs. The
  // same helpers as `ringcast serve` turn it into store and engine options (engine/build.h).
  Config cfg;
  cfg.engine.shards = 2;  // default is one per core; a demo needs few
  cfg.storage.data_dir = data_dir;
  cfg.transport.allow_http = true;  // the demo receiver speaks plain HTTP (R6 not_https)
  // Loopback is a private address (R6 private_address); allow exactly that range.
  cfg.transport.allow_private = {"127.0.0.0/8"};
  engine::EngineOptions eopts;
  try {
    cfg.validate();
    eopts = engine::engine_options(cfg);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "embed: config: %s\n", e.what());
    return 2;
  }

  // Hear of every delivery that finished (delivered, failed, dead), once that is durable. It
  // runs on a shard thread: only hand the delivery over, never block there.
  std::mutex finished_mu;
  std::condition_variable finished_cv;
  std::vector<Delivery> finished;
  eopts.on_delivery_done = [&](const Delivery& d) {
    std::lock_guard<std::mutex> lock(finished_mu);
    finished.push_back(d);
    finished_cv.notify_all();
  };

  // 2 + 3. The store and the engine on it. Intake answers once an event is durable (R12.5):
  // Embedded wires the store's durability hook to wake the shards at once. Starting the
  // engine starts its shard threads and recovers what the store holds.
  auto opened = engine::Embedded::open(engine::store_options(cfg), std::move(eopts));
  if (!opened.ok()) return fail("open store and engine", opened.error());
  std::unique_ptr<engine::Embedded> core = std::move(*opened);
  Engine& api = core->engine();  // from here on, only the public interface

  // 4. An endpoint for a tenant: payment events only (an exact type or a `prefix.*`).
  const std::string tenant = "acme";
  EndpointSpec spec;
  spec.url = external_url.empty() ? receiver->url("/webhooks") : external_url;
  spec.event_types = {"payment.*"};
  spec.secret = secret;
  auto ep = await<Endpoint>([&](auto done) { api.create_endpoint(tenant, spec, done); });
  if (!ep.ok()) return fail("create endpoint", ep.error());
  std::printf("endpoint %" PRIu64 " -> %s\n", ep->id, ep->url.c_str());

  // 5. Intake. `payload` is delivered byte for byte; the id is the producer's idempotency key.
  std::vector<EventSeq> events;
  auto one = await<SubmitResult>([&](auto done) {
    api.submit({tenant, "evt_1", "payment.succeeded", R"({"amount":1200,"currency":"EUR"})"}, done);
  });
  if (!one.ok()) return fail("submit", one.error());
  std::printf("evt_1: %s, %u deliveries\n", kind_name(one->kind), one->deliveries);
  if (one->deliveries > 0) events.push_back(one->event);
  // A batch answers once for all, in input order, each event with its own result.
  std::vector<EventInput> batch = {
      {tenant, "evt_2", "payment.failed", R"({"amount":500, "reason":"card_declined"})"},
      {tenant, "evt_3", "payment.refunded", R"({"amount":1200})"},
      {tenant, "evt_4", "invoice.created", R"({"number":"INV-7"})"},  // no endpoint wants it
  };
  auto many =
      await<std::vector<Result<SubmitResult>>>([&](auto done) { api.submit_batch(batch, done); });
  for (size_t i = 0; i < many->size(); ++i) {
    const auto& r = (*many)[i];
    if (!r.ok()) return fail("submit_batch", r.error());
    std::printf("%s: %s, %u deliveries\n", batch[i].id.c_str(), kind_name(r->kind), r->deliveries);
    if (r->deliveries > 0) events.push_back(r->event);
  }
  // The same id and payload again is a duplicate, not a second delivery (R12.5).
  auto again = await<SubmitResult>([&](auto done) {
    api.submit({tenant, "evt_1", "payment.succeeded", R"({"amount":1200,"currency":"EUR"})"}, done);
  });
  if (!again.ok() || again->kind != SubmitResult::Kind::kDuplicate)
    return std::fprintf(stderr, "embed: resubmitting evt_1 was not a duplicate\n"), 1;
  std::printf("evt_1 again: %s of event %" PRIu64 "\n", kind_name(again->kind), again->event);

  // 6. Wait for delivery: the on_delivery_done hook above reports each finished one.
  std::vector<Delivery> ours;
  {
    std::unique_lock<std::mutex> lock(finished_mu);
    auto all_in = [&] {
      ours.clear();
      for (const Delivery& d : finished)
        if (std::find(events.begin(), events.end(), d.event) != events.end()) ours.push_back(d);
      return ours.size() >= events.size();
    };
    if (!finished_cv.wait_for(lock, std::chrono::seconds(30), all_in))
      return std::fprintf(stderr, "embed: deliveries not finished after 30 s\n"), 1;
  }

  // 7. The delivery log: each delivery with its attempts (R10).
  bool all_delivered = true;
  for (const Delivery& d : ours) {
    auto detail = api.get_delivery(tenant, d.id);
    auto ev = api.get_event_by_seq(tenant, d.event);
    if (!detail.ok() || !*detail || !ev.ok() || !*ev)
      return std::fprintf(stderr, "embed: delivery %" PRIu64 " not in the log\n", d.id), 1;
    std::printf("delivery %" PRIu64 "  %-8s %-18s %-10s attempts=%u\n", d.id, (*ev)->id.c_str(),
                (*ev)->type.c_str(), delivery_status_name(d.status), d.attempts);
    for (const Attempt& a : (*detail)->attempts)
      std::printf("  attempt %u: %s http=%u in %.1f ms\n", a.number, outcome_name(a.outcome),
                  a.http_status, static_cast<double>(a.duration.count()) / 1e6);
    all_delivered = all_delivered && d.status == DeliveryStatus::kDelivered;
  }

  // 8. Stop: no new intake, in-flight attempts finish or stay leased (bounded), flush. Then
  // close the store; the engine must not outlive it.
  core->close();
  if (receiver) receiver->stop();

  std::printf("summary: %zu deliveries, %s; signatures verified %d, rejected %d\n", ours.size(),
              all_delivered ? "all delivered" : "NOT all delivered", verified.load(),
              rejected.load());
  return all_delivered && rejected.load() == 0 ? 0 : 1;
}
