#include "bridge/kafka/log.h"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>

namespace ringcast::kafka_bridge::log {
namespace {

std::atomic<int> g_min{static_cast<int>(Level::kInfo)};
std::mutex g_mu;  // one write(2) per line already; the mutex keeps lines in call order

const char* level_name(Level l) {
  switch (l) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

}  // namespace

bool parse_level(std::string_view text, Level& out) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError}) {
    if (text == level_name(l)) {
      out = l;
      return true;
    }
  }
  return false;
}

void set_level(Level min) {
  g_min.store(static_cast<int>(min));
}

bool enabled(Level level) {
  return static_cast<int>(level) >= g_min.load();
}

void write(Level level, std::string_view message) {
  if (!enabled(level)) return;
  std::string line = "ringcast-kafka-bridge: ";
  line += level_name(level);
  line += ": ";
  // One line per event: a newline inside a message (librdkafka's) would split it.
  for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;
  line += '\n';
  std::lock_guard<std::mutex> lock(g_mu);
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

}  // namespace ringcast::kafka_bridge::log
