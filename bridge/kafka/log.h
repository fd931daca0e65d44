// The bridge's logger: one line per event, "ringcast-kafka-bridge: <level>: <message>" on stderr
// (journald adds the time), written whole even when librdkafka's threads log at once. Tokens,
// passwords and header values are never given to it (docs/operations.md §6, Kafka bridge).
#pragma once

#include <string_view>

namespace ringcast::kafka_bridge::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug", "info", "warn", "error"; false for anything else.
bool parse_level(std::string_view text, Level& out);
void set_level(Level min);
bool enabled(Level level);
void write(Level level, std::string_view message);

inline void debug(std::string_view m) {
  write(Level::kDebug, m);
}
inline void info(std::string_view m) {
  write(Level::kInfo, m);
}
inline void warn(std::string_view m) {
  write(Level::kWarn, m);
}
inline void error(std::string_view m) {
  write(Level::kError, m);
}

}  // namespace ringcast::kafka_bridge::log
