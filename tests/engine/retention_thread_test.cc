// engine::RetentionThread: a pass at start and then every interval on its own thread; stop()
// ends a running pass through its stop check and cancels the wait for the next one, so a
// shutdown never waits for a long pass or an interval. Fake passes, no store.
#include "engine/retention.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace ringcast::engine {
namespace {

constexpr auto kBound = std::chrono::seconds(10);

// Runs stop() on another thread; true when it returned within the bound.
bool stops_within_bound(RetentionThread& t) {
  auto stopped = std::async(std::launch::async, [&t] { t.stop(); });
  return stopped.wait_for(kBound) == std::future_status::ready;
}

TEST(RetentionThread, RunsAtStartAndThenEveryInterval) {
  std::atomic<int> runs{0};
  RetentionThread t(
      [&runs](const std::function<bool()>&) -> Result<RetentionStats> {
        runs.fetch_add(1);
        RetentionStats st;
        st.deliveries = 2;
        return st;
      },
      milliseconds(5));
  t.start();
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (runs.load() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(stops_within_bound(t));
  EXPECT_GE(runs.load(), 4);
  EXPECT_EQ(t.passes(), static_cast<uint64_t>(runs.load()));
  const std::string m = t.metrics_text();
  EXPECT_NE(m.find("ringcast_retention_passes_total{outcome=\"done\"} " +
                   std::to_string(runs.load()) + "\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("ringcast_retention_deleted_total{kind=\"deliveries\"} " +
                   std::to_string(2 * runs.load()) + "\n"),
            std::string::npos)
      << m;
}

// A pass that would go on for 30 s unless its stop check says otherwise (a store with a
// large backlog to delete, chunk by chunk): stop() ends it.
TEST(RetentionThread, StopEndsARunningPassAtItsNextChunk) {
  std::promise<void> entered;
  std::atomic<bool> saw_stop{false};
  RetentionThread t(
      [&](const std::function<bool()>& stop) -> Result<RetentionStats> {
        entered.set_value();
        RetentionStats st;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (std::chrono::steady_clock::now() < end) {
          if (stop()) {
            saw_stop = true;
            st.stopped = true;
            return st;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));  // one chunk
        }
        return st;
      },
      seconds(30));
  t.start();
  ASSERT_EQ(entered.get_future().wait_for(kBound), std::future_status::ready);
  ASSERT_TRUE(stops_within_bound(t));
  EXPECT_TRUE(saw_stop.load());
  EXPECT_NE(t.metrics_text().find("ringcast_retention_passes_total{outcome=\"stopped\"} 1\n"),
            std::string::npos)
      << t.metrics_text();
}

// Between passes (30 s apart), stop() does not wait for the next one.
TEST(RetentionThread, StopCancelsTheWaitForTheNextPass) {
  std::atomic<int> runs{0};
  RetentionThread t(
      [&runs](const std::function<bool()>&) -> Result<RetentionStats> {
        runs.fetch_add(1);
        return make_error(Errc::kIo, "disk on fire");  // counted as failed, then the wait
      },
      seconds(30));
  t.start();
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (t.passes() < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(t.passes(), 1u);
  ASSERT_TRUE(stops_within_bound(t));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_NE(t.metrics_text().find("ringcast_retention_passes_total{outcome=\"failed\"} 1\n"),
            std::string::npos)
      << t.metrics_text();
  t.stop();  // idempotent
}

}  // namespace
}  // namespace ringcast::engine
