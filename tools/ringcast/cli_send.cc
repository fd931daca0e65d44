// `ringcast send`: streams NDJSON events (one {"tenant","id","type","payload"} per line) from a
// file or stdin to the daemon's bulk intake, several batches in flight, with a live progress
// line on stderr and a summary. Retrying a batch is safe: intake is idempotent by event id
// (SPEC R12.5), so a repeat shows up as "duplicates", never as a second event. --ordering-key
// puts one ordering key (SPEC R13.1) into every line.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/event_input.h"
#include "net/json_writer.h"
#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct SendArgs {
  std::string file = "-";
  int batch = 1000;
  int connections = 4;
  int max_batch_kib = 4096;
  bool quiet = false;
  int show_errors = 20;
  int retries = 5;
  std::optional<std::string> ordering_key;  // SPEC R13.1: put into every line
};

// `"ordering_key":"<key>"` as JSON (the key escaped), to follow a line's opening brace.
std::string ordering_key_member(const std::string& key) {
  net::JsonWriter w;
  w.begin_object().field("ordering_key", key).end_object();
  std::string obj = w.take();  // {"ordering_key":"…"}
  return obj.substr(1, obj.size() - 2);
}

struct Batch {
  std::string body;
  std::vector<uint64_t> lines;  // input line number of each body line
};

class BatchQueue {
 public:
  explicit BatchQueue(size_t cap) : cap_(cap) {}
  // False when the queue was closed (the workers gave up).
  bool push(Batch b) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return q_.size() < cap_ || closed_; });
    if (closed_) return false;
    q_.push_back(std::move(b));
    not_empty_.notify_one();
    return true;
  }
  bool pop(Batch& out) {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return !q_.empty() || done_ || closed_; });
    if (closed_ || q_.empty()) return false;
    out = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void finish() {  // no more input
    std::lock_guard lock(mu_);
    done_ = true;
    not_empty_.notify_all();
  }
  void close() {  // abort
    std::lock_guard lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<Batch> q_;
  size_t cap_;
  bool done_ = false;
  bool closed_ = false;
};

struct Stats {
  std::atomic<uint64_t> read{0};  // non-blank lines read
  std::atomic<uint64_t> done{0};  // lines answered
  std::atomic<uint64_t> accepted{0}, duplicates{0}, conflicts{0}, errors{0};
  std::atomic<uint64_t> retries{0};
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::string>> samples;  // (line, message)
  std::string fatal;

  void sample(uint64_t line, std::string msg, size_t max) {
    std::lock_guard lock(mu);
    if (samples.size() < max) samples.emplace_back(line, std::move(msg));
  }
  void set_fatal(std::string msg) {
    std::lock_guard lock(mu);
    if (fatal.empty()) fatal = std::move(msg);
  }
  std::string get_fatal() {
    std::lock_guard lock(mu);
    return fatal;
  }
};

std::string error_text(simdjson::dom::element item) {
  simdjson::dom::element err;
  if (item["error"].get(err)) return std::to_string(jint(item, "status"));
  std::string s =
      std::to_string(jint(item, "status")) + " " + jstr(err, "code") + ": " + jstr(err, "message");
  std::string field = jstr(err, "field");
  if (!field.empty()) s += " (field: " + field + ")";
  return s;
}

// Sends one batch until it is answered (or fatally not). Returns false on a fatal failure.
// Lines the server could not take right now (503: the daemon is stopping, 429) are sent
// again, alone, with the same backoff as a refused batch.
bool send_batch(HttpClient& client, simdjson::dom::parser& parser, Batch b, const SendArgs& args,
                Stats& st) {
  for (int attempt = 0;; ++attempt) {
    HttpOutcome out = client.request("POST", "/v1/events/bulk", b.body, "application/x-ndjson");
    bool retryable = !out.ok || out.reply.status == 503 || out.reply.status == 429;
    if (retryable && attempt < args.retries) {
      st.retries++;
      std::this_thread::sleep_for(std::chrono::milliseconds(100) * (1 << attempt));
      continue;
    }
    if (!out.ok) {
      st.set_fatal("cannot reach the server: " + out.error);
      return false;
    }
    const HttpReply& r = out.reply;
    simdjson::dom::element root;
    bool parsed = !parser.parse(r.body).get(root);
    if (r.status == 200 && parsed) {
      Batch again;
      std::vector<std::string_view> body_lines;  // b.body split, when a line is sent again
      simdjson::dom::array results;
      if (!root["results"].get(results)) {
        for (auto item : results) {
          int64_t status = jint(item, "status");
          if (status < 400) continue;
          int64_t line = jint(item, "line");
          const bool known = line >= 1 && static_cast<size_t>(line) <= b.lines.size();
          if (known && (status == 503 || status == 429) && attempt < args.retries) {
            if (body_lines.empty()) {
              std::string_view rest = b.body;
              while (!rest.empty()) {
                size_t nl = rest.find('\n');
                body_lines.push_back(rest.substr(0, nl));
                rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
              }
            }
            if (static_cast<size_t>(line) <= body_lines.size()) {
              again.body.append(body_lines[line - 1]).push_back('\n');
              again.lines.push_back(b.lines[line - 1]);
              continue;
            }
          }
          uint64_t input_line = known ? b.lines[line - 1] : 0;
          st.sample(input_line, error_text(item), static_cast<size_t>(args.show_errors));
        }
      }
      const uint64_t retried = again.lines.size();
      const uint64_t errors = static_cast<uint64_t>(jint(root, "errors"));
      st.accepted += static_cast<uint64_t>(jint(root, "accepted"));
      st.duplicates += static_cast<uint64_t>(jint(root, "duplicates"));
      st.conflicts += static_cast<uint64_t>(jint(root, "conflicts"));
      st.errors += errors > retried ? errors - retried : 0;
      st.done += b.lines.size() - retried;
      if (retried == 0) return true;
      st.retries++;
      std::this_thread::sleep_for(std::chrono::milliseconds(100) * (1 << attempt));
      b = std::move(again);
      continue;
    }
    std::string msg = "server answered " + std::to_string(r.status);
    simdjson::dom::element err;
    if (parsed && !root["error"].get(err)) {
      msg += " " + jstr(err, "code") + ": " + jstr(err, "message");
    }
    if (r.status == 401 || r.status == 403) {
      st.set_fatal(msg + "\nhint: pass --token or set RINGCAST_API_TOKEN");
      return false;
    }
    if (r.status == 413) {
      st.set_fatal(msg + "\nhint: use a smaller --batch or --max-batch-kib");
      return false;
    }
    // The batch as a whole was refused: every line of it counts as an error.
    st.errors += b.lines.size();
    st.done += b.lines.size();
    st.sample(b.lines.empty() ? 0 : b.lines.front(),
              "whole batch of " + std::to_string(b.lines.size()) + " lines: " + msg,
              static_cast<size_t>(args.show_errors));
    return true;
  }
}

std::string progress_line(const Stats& st, double secs) {
  uint64_t done = st.done.load();
  double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%llu events  %.0f ev/s  accepted %llu  duplicates %llu  conflicts %llu  errors "
                "%llu",
                static_cast<unsigned long long>(done), rate,
                static_cast<unsigned long long>(st.accepted.load()),
                static_cast<unsigned long long>(st.duplicates.load()),
                static_cast<unsigned long long>(st.conflicts.load()),
                static_cast<unsigned long long>(st.errors.load()));
  return buf;
}

void run_send(GlobalOptions& g, const SendArgs& args) {
  std::string key_member;  // SPEC R13.1: checked once here rather than refused on every line
  if (args.ordering_key) {
    if (auto e = check_ordering_key(*args.ordering_key, /*given=*/true)) {
      throw CliError("--ordering-key: " + e->message);
    }
    key_member = ordering_key_member(*args.ordering_key);
  }
  FILE* in = stdin;
  bool close_in = false;
  if (args.file != "-") {
    in = std::fopen(args.file.c_str(), "rb");
    if (!in) throw CliError("cannot open " + args.file + ": " + std::strerror(errno));
    close_in = true;
  }
  Target target = resolve_target(g);
  Stats st;
  BatchQueue queue(static_cast<size_t>(args.connections) * 2);
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int i = 0; i < args.connections; ++i) {
    workers.emplace_back([&] {
      HttpClient client(target.server, target.token);
      simdjson::dom::parser parser;
      Batch b;
      while (queue.pop(b)) {
        if (!send_batch(client, parser, std::move(b), args, st)) {
          failed = true;
          queue.close();
          return;
        }
      }
    });
  }

  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto start = SteadyClock::now();
  std::mutex pmu;
  std::condition_variable pcv;
  bool stop_progress = false;
  std::thread progress([&] {
    if (args.quiet) return;
    auto interval = tty ? std::chrono::milliseconds(200) : std::chrono::milliseconds(1000);
    std::unique_lock lock(pmu);
    while (!pcv.wait_for(lock, interval, [&] { return stop_progress; })) {
      double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
      std::string line = progress_line(st, secs);
      if (tty) {
        std::fprintf(stderr, "\r\033[K%s", line.c_str());
      } else {
        std::fprintf(stderr, "progress: %s\n", line.c_str());
      }
      std::fflush(stderr);
    }
  });

  // Read lines into batches.
  const size_t max_bytes = static_cast<size_t>(args.max_batch_kib) * 1024;
  Batch cur;
  uint64_t line_no = 0;
  std::string partial;
  std::vector<char> buf(1 << 20);
  bool read_error = false;
  auto add_line = [&](std::string_view line) {
    line_no++;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    size_t lead = line.find_first_not_of(" \t");
    if (lead == std::string_view::npos) return true;  // blank
    if (!cur.lines.empty() && cur.body.size() + line.size() + key_member.size() + 2 > max_bytes) {
      if (!queue.push(std::move(cur))) return false;
      cur = Batch();
    }
    if (!key_member.empty() && line[lead] == '{') {
      // {"ordering_key":"…", then the line's own members (a line that names its own
      // ordering_key is refused by the server: duplicate_field).
      std::string_view members = line.substr(lead + 1);
      const size_t next = members.find_first_not_of(" \t");
      cur.body.append(line.substr(0, lead + 1)).append(key_member);
      if (next != std::string_view::npos && members[next] != '}') cur.body.push_back(',');
      cur.body.append(members).push_back('\n');
    } else {
      cur.body.append(line).push_back('\n');
    }
    cur.lines.push_back(line_no);
    st.read++;
    if (cur.lines.size() >= static_cast<size_t>(args.batch)) {
      if (!queue.push(std::move(cur))) return false;
      cur = Batch();
    }
    return true;
  };
  bool go = true;
  while (go) {
    // read(2), not fread: a live pipe is sent as it arrives, not when 1 MiB has gathered.
    ssize_t got = ::read(fileno(in), buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      read_error = got < 0;
      break;
    }
    size_t n = static_cast<size_t>(got);
    std::string_view chunk(buf.data(), n);
    size_t pos = 0;
    while (go) {
      size_t nl = chunk.find('\n', pos);
      if (nl == std::string_view::npos) {
        partial.append(chunk.substr(pos));
        break;
      }
      if (partial.empty()) {
        go = add_line(chunk.substr(pos, nl - pos));
      } else {
        partial.append(chunk.substr(pos, nl - pos));
        go = add_line(partial);
        partial.clear();
      }
      pos = nl + 1;
    }
  }
  if (go && !partial.empty()) go = add_line(partial);
  if (go && !cur.lines.empty()) queue.push(std::move(cur));
  queue.finish();
  for (auto& w : workers) w.join();
  if (close_in) std::fclose(in);
  {
    std::lock_guard lock(pmu);
    stop_progress = true;
  }
  pcv.notify_all();
  progress.join();
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  if (!args.quiet && tty) std::fprintf(stderr, "\r\033[K");

  for (const auto& [line, msg] : st.samples) {
    std::fprintf(stderr, "line %llu: %s\n", static_cast<unsigned long long>(line), msg.c_str());
  }
  uint64_t failed_lines = st.conflicts.load() + st.errors.load();
  if (failed_lines > st.samples.size() && !st.samples.empty()) {
    std::fprintf(stderr, "... and %llu more rejected lines\n",
                 static_cast<unsigned long long>(failed_lines - st.samples.size()));
  }
  if (read_error) throw CliError("error reading " + (args.file == "-" ? "stdin" : args.file));
  if (failed) {
    throw CliError("send stopped after " + std::to_string(st.done.load()) +
                   " events: " + st.get_fatal());
  }

  uint64_t done = st.done.load();
  double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  if (g.json) {
    std::printf(
        "{\"events\":%llu,\"accepted\":%llu,\"duplicates\":%llu,\"conflicts\":%llu,\"errors\":"
        "%llu,\"retries\":%llu,\"seconds\":%.3f,\"events_per_second\":%.1f}\n",
        static_cast<unsigned long long>(done), static_cast<unsigned long long>(st.accepted.load()),
        static_cast<unsigned long long>(st.duplicates.load()),
        static_cast<unsigned long long>(st.conflicts.load()),
        static_cast<unsigned long long>(st.errors.load()),
        static_cast<unsigned long long>(st.retries.load()), secs, rate);
  } else {
    std::printf("sent %llu events in %.2f s (%.0f events/s)\n",
                static_cast<unsigned long long>(done), secs, rate);
    Table t({"RESULT", "EVENTS"});
    t.add({"accepted", std::to_string(st.accepted.load())});
    t.add({"duplicates", std::to_string(st.duplicates.load())});
    t.add({"conflicts", std::to_string(st.conflicts.load())});
    t.add({"errors", std::to_string(st.errors.load())});
    std::fputs(t.str().c_str(), stdout);
  }
  std::fflush(stdout);
  if (failed_lines > 0) {
    g.exit_code = kExitSomeFailed;
    std::fprintf(stderr, "%llu of %llu events were not accepted\n",
                 static_cast<unsigned long long>(failed_lines),
                 static_cast<unsigned long long>(done));
  }
}

}  // namespace

void add_send_command(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<SendArgs>();
  CLI::App* send = app.add_subcommand(
      "send",
      "stream NDJSON events ({\"tenant\",\"id\",\"type\",\"payload\"} per line) to the daemon");
  send->add_option("file", args->file, "NDJSON file; - or absent: stdin")
      ->check(CLI::ExistingFile | CLI::IsMember({"-"}));
  send->add_option("--batch", args->batch, "events per request")->check(CLI::Range(1, 100000));
  send->add_option("--connections,-c", args->connections, "requests in flight")
      ->check(CLI::Range(1, 64));
  send->add_option("--max-batch-kib", args->max_batch_kib, "bytes per request, KiB")
      ->check(CLI::Range(1, 1024 * 1024));
  send->add_option("--show-errors", args->show_errors, "rejected lines to print")
      ->check(CLI::Range(0, 1000000));
  send->add_option("--retries", args->retries, "retries of a batch the server could not take")
      ->check(CLI::Range(0, 20));
  send->add_flag("--quiet,-q", args->quiet, "no progress line");
  send->add_option("--ordering-key", args->ordering_key,
                   "put this ordering key into every event (SPEC R13: 1-256 printable ASCII)");
  send->callback([&g, args] { run_send(g, *args); });
}

}  // namespace ringcast::cli
