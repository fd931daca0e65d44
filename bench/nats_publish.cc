// The NATS side of bench/e2e_nats_intake.sh: creates JetStream streams and publishes events with
// the project's NATS client (nats/connection.h), so that the benchmark needs no NATS tool Debian
// does not ship. Events come as the bulk route's NDJSON lines ({"tenant","id","type","payload"},
// bench/support/e2e_lib.sh gen_events): each becomes a message on --subject with the headers
// Ringcast-Tenant / Ringcast-Id / Ringcast-Type and the payload's bytes as its body, published with
// a JetStream publish (at most --window awaiting their PubAck; one without a PubAck is published
// again). It exits once every message is stored.
//
// Usage: bench_nats_publish --server 127.0.0.1:4222 [--stream NAME=SUBJECT]... [--subject S]
//        [--purge NAME]... [--window N] [--timeout SECONDS] [FILE | -]
//   --stream NAME=SUBJECT  create the stream (file storage) capturing SUBJECT, before publishing
//   --purge NAME           purge the stream's messages, before publishing
//   FILE                   NDJSON events to publish ("-": stdin; none: only create the streams)
// Prints "published N messages in S s (R/s), repeated K" on stdout; exit 1 on a failure.
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "nats/connection.h"
#include "nats/jetstream.h"
#include "nats/protocol.h"
#include "net/loop.h"

namespace {

using namespace ringcast;
using Steady = std::chrono::steady_clock;

struct Out {
  std::string headers;
  std::string data;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_nats_publish: %s\n", what.c_str());
  std::exit(1);
}

std::vector<Out> read_events(std::istream& in) {
  std::vector<Out> out;
  simdjson::ondemand::parser parser;
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    simdjson::padded_string padded(line);
    simdjson::ondemand::document doc;
    if (parser.iterate(padded).get(doc)) die("line " + std::to_string(n) + " is not JSON");
    std::string_view tenant, id, type, payload;
    simdjson::ondemand::object obj;
    if (doc.get_object().get(obj)) die("line " + std::to_string(n) + " is not an object");
    for (auto field : obj) {
      std::string_view key;
      if (field.unescaped_key().get(key)) die("a bad key");
      simdjson::ondemand::value v = field.value();
      if (key == "tenant") {
        if (v.get_string().get(tenant)) die("tenant is not a string");
      } else if (key == "id") {
        if (v.get_string().get(id)) die("id is not a string");
      } else if (key == "type") {
        if (v.get_string().get(type)) die("type is not a string");
      } else if (key == "payload") {
        simdjson::ondemand::object o;
        if (v.get_object().get(o) || o.raw_json().get(payload)) die("payload is not an object");
      }
      // the views point into the parser's buffers until the next line: copied below
    }
    Out m;
    m.headers = nats::encode_headers({{"Ringcast-Tenant", std::string(tenant)},
                                      {"Ringcast-Id", std::string(id)},
                                      {"Ringcast-Type", std::string(type)}});
    while (!payload.empty() && (payload.back() == ' ' || payload.back() == '\n'))
      payload.remove_suffix(1);
    m.data.assign(payload);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string server = "127.0.0.1:4222";
  std::string subject = "bench.events";
  std::vector<std::pair<std::string, std::string>> streams;
  std::vector<std::string> purges;
  size_t window = 1024;
  int timeout_s = 120;
  std::string file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--server") {
      server = next();
    } else if (a == "--subject") {
      subject = next();
    } else if (a == "--stream") {
      const std::string s = next();
      const size_t eq = s.find('=');
      if (eq == std::string::npos) die("--stream NAME=SUBJECT");
      streams.emplace_back(s.substr(0, eq), s.substr(eq + 1));
    } else if (a == "--purge") {
      purges.push_back(next());
    } else if (a == "--window") {
      window = static_cast<size_t>(std::atol(next().c_str()));
    } else if (a == "--timeout") {
      timeout_s = std::atoi(next().c_str());
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      die("unknown option " + a);
    } else {
      file = a;
    }
  }
  std::vector<Out> msgs;
  if (file == "-") {
    msgs = read_events(std::cin);
  } else if (!file.empty()) {
    std::ifstream in(file);
    if (!in) die("cannot read " + file);
    msgs = read_events(in);
  }

  auto l = net::Loop::create({});
  if (!l.ok()) die(l.error().message);
  net::Loop& loop = **l;
  nats::ConnectionOptions o;
  o.servers = {server};
  o.name = "bench_nats_publish";
  o.max_pending_bytes = 64u << 20;
  auto c = nats::Connection::create(loop, o);
  if (!c.ok()) die(c.error().message);
  nats::Connection& conn = **c;
  const auto deadline = Steady::now() + std::chrono::seconds(timeout_s);
  auto run_until = [&](const std::function<bool()>& done, const char* what) {
    while (!done()) {
      if (Steady::now() > deadline) die(std::string("timed out ") + what);
      loop.run_once(milliseconds(10));
    }
  };
  run_until([&] { return conn.ready(); }, "connecting");

  for (const auto& [name, subj] : streams) {
    std::string body = "{\"name\":";
    nats::append_json_string(body, name);
    body += ",\"subjects\":[";
    nats::append_json_string(body, subj);
    body += "],\"storage\":\"file\",\"allow_direct\":true}";
    bool done = false;
    conn.request("$JS.API.STREAM.CREATE." + name, body, [&](Result<nats::Msg> r) {
      if (!r.ok()) die(std::string("STREAM.CREATE: ") + r.error().message);
      const nats::ApiReply a = nats::parse_api_reply(r->data);
      if (a.error) die("STREAM.CREATE " + name + ": " + a.description);
      done = true;
    });
    run_until([&] { return done; }, "creating a stream");
  }

  for (const auto& name : purges) {
    bool done = false;
    conn.request("$JS.API.STREAM.PURGE." + name, "{}", [&](Result<nats::Msg> r) {
      if (!r.ok()) die(std::string("STREAM.PURGE: ") + r.error().message);
      const nats::ApiReply a = nats::parse_api_reply(r->data);
      if (a.error) die("STREAM.PURGE " + name + ": " + a.description);
      done = true;
    });
    run_until([&] { return done; }, "purging a stream");
  }

  const auto t0 = Steady::now();
  size_t next = 0, in_flight = 0, acked = 0;
  std::vector<size_t> again;
  int repeats = 0;
  std::function<void()> pump = [&] {
    while (in_flight < window && (next < msgs.size() || !again.empty())) {
      size_t i;
      if (!again.empty()) {
        i = again.back();
        again.pop_back();
      } else {
        i = next++;
      }
      ++in_flight;
      conn.request(
          subject, msgs[i].data,
          [&, i](Result<nats::Msg> r) {
            --in_flight;
            bool ok = false;
            if (r.ok()) {
              const nats::ApiReply a = nats::parse_api_reply(r->data);
              ok = a.json && !a.error && a.seq > 0;
            }
            if (ok) {
              ++acked;
            } else {
              ++repeats;
              again.push_back(i);
            }
            pump();
          },
          std::chrono::seconds(10), msgs[i].headers);
    }
  };
  pump();
  run_until([&] { return acked == msgs.size(); }, "publishing");
  const double secs = std::chrono::duration<double>(Steady::now() - t0).count();
  std::printf("published %zu messages in %.3f s (%.0f/s), repeated %d\n", msgs.size(), secs,
              secs > 0 ? static_cast<double>(msgs.size()) / secs : 0.0, repeats);
  return 0;
}
