// The daemon's one logger: every module that tells the operator something (a store going
// degraded, a source down, a shard stopping) writes through it, never to stderr by hand. One
// line per event, "ringcast: <message>" on stderr (the lines the docs quote and the tests look
// for), written whole even when threads log at once. The one process-wide object the house
// allows besides the metrics registry (STYLE 9): a log is the process's, not a shard's.
// Backed by spdlog (Debian libspdlog-dev), kept out of this header: modules format with fmt.
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace ringcast::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Lines below `min` are dropped (default: kInfo).
void set_level(Level min);
bool enabled(Level level);
// One line (the message without its trailing newline).
void write(Level level, std::string_view message);

// One line at `level`, formatted only when the level is on.
template <class... Args>
void at(Level level, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(level)) write(level, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kDebug, f, std::forward<Args>(args)...);
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kInfo, f, std::forward<Args>(args)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kWarn, f, std::forward<Args>(args)...);
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kError, f, std::forward<Args>(args)...);
}

}  // namespace ringcast::log
