#include "log/log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <memory>

namespace ringcast::log {

namespace {

std::atomic<int> g_min{static_cast<int>(Level::kInfo)};

spdlog::level::level_enum spd(Level l) {
  switch (l) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

// Made on first use, never destroyed (a line logged while the process exits still goes out).
spdlog::logger& logger() {
  static spdlog::logger* const l = [] {
    auto* made = new spdlog::logger("ringcast", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    made->set_pattern("ringcast: %v");
    made->set_level(spdlog::level::trace);  // the level is ours (g_min)
    made->flush_on(spdlog::level::trace);   // every line reaches stderr at once
    return made;
  }();
  return *l;
}

}  // namespace

void set_level(Level min) {
  g_min.store(static_cast<int>(min), std::memory_order_relaxed);
}

bool enabled(Level level) {
  return static_cast<int>(level) >= g_min.load(std::memory_order_relaxed);
}

void write(Level level, std::string_view message) {
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  logger().log(spd(level), "{}", message);
}

}  // namespace ringcast::log
