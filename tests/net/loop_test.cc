// Tests for net::Loop: real io_uring, real sockets on loopback.
#include "net/loop.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ringcast::net {
namespace {

std::unique_ptr<Loop> make_loop(LoopOptions o = {}) {
  auto r = Loop::create(o);
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

// Runs turns until `done` or the (generous) bound of turns is hit.
template <class Pred>
bool run_until(Loop& loop, Pred done, int max_turns = 2000) {
  for (int i = 0; i < max_turns && !done(); ++i) loop.run_once(milliseconds(10));
  return done();
}

TEST(LoopTest, CreatesWithSomeSetupFlags) {
  auto loop = make_loop();
  EXPECT_GT(loop->cq_capacity(), 0u);
  loop->run_once(Duration::zero());
  // Kernel >= 6.1: single issuer + deferred task running is available.
  EXPECT_NE(loop->setup_flags() & IORING_SETUP_SINGLE_ISSUER, 0u);
  EXPECT_NE(loop->setup_flags() & IORING_SETUP_DEFER_TASKRUN, 0u);
  LoopOptions plain;
  plain.try_single_issuer = false;
  auto loop2 = make_loop(plain);
  EXPECT_EQ(loop2->setup_flags() & IORING_SETUP_SINGLE_ISSUER, 0u);
  int fired = 0;
  TimerFn t([&] { fired++; });
  loop2->arm_after(&t, milliseconds(1));
  EXPECT_TRUE(run_until(*loop2, [&] { return fired == 1; }));
}

TEST(LoopTest, SendRecvOnSocketPair) {
  auto loop = make_loop();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  char rbuf[16] = {};
  int sent = -1, got = -1;
  IoFn send_op([&](int res, uint32_t) { sent = res; });
  IoFn recv_op([&](int res, uint32_t) { got = res; });
  ASSERT_TRUE(loop->recv(&recv_op, sv[1], rbuf, sizeof(rbuf)));
  ASSERT_TRUE(loop->send(&send_op, sv[0], "hello", 5));
  // Completions never run inline inside the submit call.
  EXPECT_EQ(sent, -1);
  EXPECT_TRUE(run_until(*loop, [&] { return sent >= 0 && got >= 0; }));
  EXPECT_EQ(sent, 5);
  EXPECT_EQ(got, 5);
  EXPECT_EQ(std::string(rbuf, 5), "hello");
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(LoopTest, RegisteredFiles) {
  LoopOptions o;
  o.registered_files = 2;
  auto loop = make_loop(o);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  const int s0 = loop->register_fd(sv[0]);
  const int s1 = loop->register_fd(sv[1]);
  ASSERT_GE(s0, 0);
  ASSERT_GE(s1, 0);
  EXPECT_EQ(loop->register_fd(sv[0]), -1);  // the table is full
  char rbuf[8] = {};
  int sent = -1, got = -1;
  IoFn send_op([&](int res, uint32_t) { sent = res; });
  IoFn recv_op([&](int res, uint32_t) { got = res; });
  ASSERT_TRUE(loop->recv(&recv_op, FileRef::slot(s1), rbuf, sizeof(rbuf)));
  ASSERT_TRUE(loop->send(&send_op, FileRef::slot(s0), "fixed", 5));
  EXPECT_TRUE(run_until(*loop, [&] { return sent >= 0 && got >= 0; }));
  EXPECT_EQ(std::string(rbuf, 5), "fixed");
  // cancel_fd works on a slot too.
  int pending = 1;
  IoFn p([&](int res, uint32_t) { pending = res; });
  ASSERT_TRUE(loop->recv(&p, FileRef::slot(s1), rbuf, sizeof(rbuf)));
  loop->run_once(Duration::zero());
  loop->cancel_fd(FileRef::slot(s1));
  EXPECT_TRUE(run_until(*loop, [&] { return pending <= 0; }));
  EXPECT_EQ(pending, -ECANCELED);
  loop->unregister_fd(s0);
  loop->unregister_fd(s1);
  EXPECT_GE(loop->register_fd(sv[0]), 0);  // slots are reused
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(LoopTest, AcceptConnectOnLoopback) {
  auto loop = make_loop();
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);

  int cfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int accepted = -1, connected = 1;
  IoFn acc([&](int res, uint32_t) { accepted = res; });
  IoFn con([&](int res, uint32_t) { connected = res; });
  ASSERT_TRUE(loop->accept(&acc, lfd, nullptr, nullptr));
  ASSERT_TRUE(loop->connect(&con, cfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
  EXPECT_TRUE(run_until(*loop, [&] { return accepted >= 0 && connected <= 0; }));
  EXPECT_EQ(connected, 0);
  EXPECT_GE(accepted, 0);
  int closed = 1;
  IoFn cl([&](int res, uint32_t) { closed = res; });
  ASSERT_TRUE(loop->close(&cl, accepted));
  EXPECT_TRUE(run_until(*loop, [&] { return closed <= 0; }));
  EXPECT_EQ(closed, 0);
  ::close(cfd);
  ::close(lfd);
}

TEST(LoopTest, ConnectRefusedReportsErrno) {
  auto loop = make_loop();
  // Bind then close to get a port nobody listens on.
  int tmp = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(tmp, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(tmp, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(tmp);
  int cfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int res = 1;
  IoFn con([&](int r, uint32_t) { res = r; });
  ASSERT_TRUE(loop->connect(&con, cfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
  EXPECT_TRUE(run_until(*loop, [&] { return res <= 0; }));
  EXPECT_EQ(res, -ECONNREFUSED);
  ::close(cfd);
}

TEST(LoopTest, CancelCompletesWithECanceled) {
  auto loop = make_loop();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  char buf[8];
  int res = 1;
  IoFn op([&](int r, uint32_t) { res = r; });
  ASSERT_TRUE(loop->recv(&op, sv[0], buf, sizeof(buf)));
  loop->run_once(Duration::zero());
  EXPECT_EQ(res, 1);
  loop->cancel(&op);
  EXPECT_TRUE(run_until(*loop, [&] { return res <= 0; }));
  EXPECT_EQ(res, -ECANCELED);
  // cancel_fd cancels every op on the fd.
  int r1 = 1, r2 = 1;
  char b1[4];
  IoFn p1([&](int r, uint32_t) { r1 = r; });
  IoFn p2([&](int r, uint32_t) { r2 = r; });
  ASSERT_TRUE(loop->recv(&p1, sv[1], b1, sizeof(b1)));
  ASSERT_TRUE(loop->poll(&p2, sv[1], POLLIN));
  loop->run_once(Duration::zero());
  loop->cancel_fd(sv[1]);
  EXPECT_TRUE(run_until(*loop, [&] { return r1 <= 0 && r2 <= 0; }));
  EXPECT_EQ(r1, -ECANCELED);
  EXPECT_EQ(r2, -ECANCELED);
  const uint32_t wake_read = 1;
  EXPECT_EQ(loop->in_flight(), wake_read);
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(LoopTest, TimersFireInDeadlineOrderAndDisarm) {
  auto loop = make_loop();
  std::vector<int> order;
  TimerFn a([&] { order.push_back(1); });
  TimerFn b([&] { order.push_back(2); });
  TimerFn c([&] { order.push_back(3); });
  TimerFn d([&] { order.push_back(4); });
  loop->arm_after(&c, milliseconds(30));
  loop->arm_after(&a, milliseconds(5));
  loop->arm_after(&b, milliseconds(15));
  loop->arm_after(&d, milliseconds(20));
  loop->disarm(&d);
  EXPECT_FALSE(d.armed());
  EXPECT_TRUE(a.armed());
  EXPECT_EQ(loop->timers_armed(), 3u);
  EXPECT_TRUE(run_until(*loop, [&] { return order.size() == 3; }));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(loop->timers_armed(), 0u);
  // Re-arming moves a timer; a timer may re-arm itself from on_timer().
  int n = 0;
  struct Repeat final : Timer {
    Loop* loop;
    int* n;
    void on_timer() override {
      if (++*n < 3) loop->arm_after(this, milliseconds(1));
    }
  } rep;
  rep.loop = loop.get();
  rep.n = &n;
  loop->arm_after(&rep, hours(1));
  loop->arm_after(&rep, milliseconds(1));
  EXPECT_TRUE(run_until(*loop, [&] { return n == 3; }));
  EXPECT_FALSE(rep.armed());
}

TEST(LoopTest, ManyTimersHeapStaysConsistent) {
  ManualClock clock;
  LoopOptions o;
  o.clock = &clock;
  o.max_timers_per_turn = 64;
  auto loop = make_loop(o);
  constexpr int kN = 1000;
  std::vector<std::unique_ptr<TimerFn<std::function<void()>>>> timers;
  std::vector<int64_t> fired_at;
  for (int i = 0; i < kN; ++i) {
    timers.push_back(std::make_unique<TimerFn<std::function<void()>>>(
        [&fired_at, &clock] { fired_at.push_back(clock.mono_now().ns()); }));
  }
  uint64_t x = 12345;
  for (int i = 0; i < kN; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    loop->arm(timers[i].get(), loop->now() + milliseconds(static_cast<int64_t>(x % 500)));
  }
  for (int i = 0; i < kN; i += 3) loop->disarm(timers[i].get());
  const size_t expected = static_cast<size_t>(kN - (kN + 2) / 3);
  EXPECT_EQ(loop->timers_armed(), expected);
  for (int step = 0; step < 600; ++step) {
    clock.advance(milliseconds(1));
    // Bounded work per turn: never more than max_timers_per_turn.
    const size_t before = fired_at.size();
    loop->run_once(Duration::zero());
    EXPECT_LE(fired_at.size() - before, 64u + 1u);
  }
  for (int i = 0; i < 20; ++i) loop->run_once(Duration::zero());
  EXPECT_EQ(fired_at.size(), expected);
  EXPECT_TRUE(std::is_sorted(fired_at.begin(), fired_at.end()));
}

TEST(LoopTest, DeferredTasksRunNextTurnInOrder) {
  auto loop = make_loop();
  std::vector<int> order;
  struct T final : Task {
    std::vector<int>* order;
    int id;
    Loop* loop;
    T* chain = nullptr;
    void run() override {
      order->push_back(id);
      if (chain) loop->defer(chain);
    }
  };
  T t1, t2, t3;
  for (auto [t, id] : {std::pair{&t1, 1}, {&t2, 2}, {&t3, 3}}) {
    t->order = &order;
    t->id = id;
    t->loop = loop.get();
  }
  t1.chain = &t3;  // deferred from inside a task: runs on the following turn
  loop->defer(&t1);
  loop->defer(&t2);
  EXPECT_TRUE(order.empty());
  loop->run_once(Duration::zero());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  loop->run_once(Duration::zero());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(LoopTest, PostFromOtherThreadsWakesABlockedLoop) {
  auto loop = make_loop();
  constexpr int kThreads = 3;
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kPerThread = 2000;
#else
  constexpr int kPerThread = 20000;
#endif
  std::atomic<int> started{0};
  int count = 0;  // loop thread only
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&] {
      started++;
      for (int i = 0; i < kPerThread; ++i) loop->post([&count] { count++; });
    });
  }
  // A long max_wait: only wake-ups end the waits promptly.
  for (int i = 0; i < 100000 && count < kThreads * kPerThread; ++i) loop->run_once(seconds(5));
  for (auto& th : producers) th.join();
  EXPECT_EQ(count, kThreads * kPerThread);
  EXPECT_GE(loop->stats().posts, uint64_t{kThreads * kPerThread});

  // stop() from another thread ends run().
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(20));
    loop->stop();
  });
  loop->run();
  stopper.join();
}

TEST(LoopTest, CreatedOnOneThreadRunOnAnother) {
  auto loop = make_loop();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  char buf[4];
  int got = -1;
  IoFn op([&](int r, uint32_t) { got = r; });
  std::thread runner([&] {
    // The first run_once() binds the ring to this thread (single issuer).
    ASSERT_TRUE(loop->recv(&op, sv[0], buf, sizeof(buf)));
    ASSERT_EQ(::write(sv[1], "abc", 3), 3);
    run_until(*loop, [&] { return got >= 0; });
  });
  runner.join();
  EXPECT_EQ(got, 3);
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(LoopTest, InFlightIsCappedAndReapIsBounded) {
  LoopOptions o;
  o.sq_entries = 16;
  o.cq_entries = 256;
  o.max_cqes_per_turn = 32;
  auto loop = make_loop(o);
  const unsigned cap = loop->cq_capacity();
  ASSERT_LE(cap, 256u);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  struct Nop final : IoOp {
    int* done;
    void complete(int, uint32_t) override { ++*done; }
  };
  std::vector<Nop> ops(cap + 10);
  std::vector<char> bufs(cap + 10);
  int done = 0;
  unsigned accepted = 0;
  for (auto& op : ops) op.done = &done;
  for (size_t i = 0; i < ops.size(); ++i) {
    // Polls on a socket that is writable complete at once.
    if (loop->poll(&ops[i], sv[0], POLLOUT)) accepted++;
  }
  // The wake read holds one slot.
  EXPECT_EQ(accepted, cap - 1);
  EXPECT_EQ(loop->in_flight(), cap);
  // More than the SQ size was queued: the loop flushed a full SQ instead of failing.
  int turns = 0;
  while (done < static_cast<int>(accepted) && turns < 1000) {
    const int before = done;
    loop->run_once(milliseconds(10));
    EXPECT_LE(done - before, 32);
    turns++;
  }
  EXPECT_EQ(done, static_cast<int>(accepted));
  EXPECT_GT(turns, 1);
  EXPECT_EQ(loop->in_flight(), 1u);
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(LoopTest, ReadOnEventFd) {
  auto loop = make_loop();
  int efd = ::eventfd(0, EFD_NONBLOCK);
  uint64_t value = 0;
  int res = -1000;
  IoFn op([&](int r, uint32_t) { res = r; });
  ASSERT_TRUE(loop->read(&op, efd, &value, sizeof(value)));
  uint64_t seven = 7;
  ASSERT_EQ(::write(efd, &seven, sizeof(seven)), 8);
  EXPECT_TRUE(run_until(*loop, [&] { return res != -1000; }));
  EXPECT_EQ(res, 8);
  EXPECT_EQ(value, 7u);
  ::close(efd);
}

}  // namespace
}  // namespace ringcast::net
