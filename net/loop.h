// The per-thread io_uring event loop: caller-owned, pinned operations
// whose address is the user_data (STYLE 4), timers, deferred tasks and cross-thread posting.
// Invariants: everything except post()/wake()/stop() runs on the loop's thread; completions,
// timers and tasks run only from run_once(), never inline inside a submit call (STYLE 5);
// ops in flight never exceed the CQ size; each turn does bounded work.
//
// Typical use (one Loop per shard thread):
//   auto loop = net::Loop::create({});            // may be created on another thread;
//   ...                                           // the first run_once() binds the thread.
//   struct MyRecv final : net::IoOp { void complete(int res, uint32_t) override {...} } op;
//   if (!loop->recv(&op, fd, buf, len)) { /* no capacity: treat as ENOBUFS */ }
//   loop->run();                                  // until stop()
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/result.h"
#include "core/time.h"

struct io_uring;
struct io_uring_sqe;
struct __kernel_timespec;
struct iovec;

namespace ringcast::net {

// One I/O operation, owned by the caller. It must stay alive and at the same address from
// submission until complete() has run (for multishot ops: until a completion without
// IORING_CQE_F_MORE). An op has at most one submission in flight at a time.
class IoOp {
 public:
  IoOp() = default;
  IoOp(const IoOp&) = delete;
  IoOp& operator=(const IoOp&) = delete;

  // `res` is the CQE result (>= 0, or -errno; -ECANCELED after cancel()); `flags` the CQE
  // flags (IORING_CQE_F_MORE, IORING_CQE_F_BUFFER, ...). The op may be resubmitted or
  // destroyed inside complete().
  virtual void complete(int res, uint32_t flags) = 0;
  virtual ~IoOp() = default;
};

// An IoOp that calls a callable: `IoFn op([&](int res, uint32_t flags) {...});`.
template <class F>
class IoFn final : public IoOp {
 public:
  explicit IoFn(F f) : f_(std::move(f)) {}
  void complete(int res, uint32_t flags) override { f_(res, flags); }

 private:
  F f_;
};

// A timer, owned by the caller (intrusive: arming allocates nothing once the heap has grown).
// Fires once per arm(); may re-arm itself inside on_timer(). Must be disarmed (or have fired)
// before it is destroyed.
class Timer {
 public:
  Timer() = default;
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  virtual ~Timer() = default;
  virtual void on_timer() = 0;
  bool armed() const { return heap_index_ != kNotArmed; }
  MonoTime deadline() const { return deadline_; }

 private:
  friend class Loop;
  static constexpr uint32_t kNotArmed = UINT32_MAX;
  MonoTime deadline_;
  uint32_t heap_index_ = kNotArmed;
  uint64_t seq_ = 0;  // FIFO among equal deadlines
};

template <class F>
class TimerFn final : public Timer {
 public:
  explicit TimerFn(F f) : f_(std::move(f)) {}
  void on_timer() override { f_(); }

 private:
  F f_;
};

// A unit of work run on the loop thread: posted from any thread (post) or deferred from the
// loop thread itself (defer). Intrusive; the caller owns it until run() starts.
class Task {
 public:
  Task() = default;
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  virtual ~Task() = default;
  virtual void run() = 0;

 private:
  friend class Loop;
  std::atomic<Task*> next_{nullptr};
};

// The file an op works on: a plain descriptor (implicit from int), or a slot of the ring's
// registered file table (register_fd()), which saves a file lookup per op.
struct FileRef {
  int index = -1;
  bool fixed = false;
  FileRef(int fd) : index(fd) {}  // NOLINT(google-explicit-constructor): plain fds read naturally
  static FileRef slot(int s) {
    FileRef f(s);
    f.fixed = true;
    return f;
  }
};

struct LoopOptions {
  unsigned sq_entries = 256;           // submission ring; full rings are flushed, never an error
  unsigned cq_entries = 8192;          // also the cap on ops in flight (STYLE 6)
  unsigned max_cqes_per_turn = 512;    // completions reaped per turn (STYLE 5)
  unsigned max_timers_per_turn = 512;  // timers fired per turn
  unsigned max_tasks_per_turn = 1024;  // posted + deferred tasks run per turn
  // Try IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN, then COOP_TASKRUN, then nothing.
  bool try_single_issuer = true;
  unsigned registered_files = 4096;  // slots of the registered file table (0: none)
  Clock* clock = nullptr;            // default: the system clock (owned by the loop)
};

struct LoopStats {
  uint64_t turns = 0;
  uint64_t cqes = 0;
  uint64_t submits = 0;  // io_uring_enter calls that submitted
  uint64_t timers_fired = 0;
  uint64_t tasks_run = 0;
  uint64_t posts = 0;
  uint64_t wakeups = 0;  // eventfd writes
  uint32_t in_flight = 0;
  uint32_t in_flight_max = 0;
};

class Loop {
 public:
  static Result<std::unique_ptr<Loop>> create(const LoopOptions& options = {});
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // --- time (read once per turn, STYLE 2) -------------------------------------------------
  MonoTime now() const { return now_; }
  // The system's wall clock, except that it never runs backwards: after a step back it runs on
  // at half speed until the system clock catches up (refresh_now).
  WallTime wall_now() const { return wall_now_; }
  Clock& clock() { return *clock_; }
  void refresh_now();  // re-reads the clock (rarely needed; run_once() does it)
  // True while run_once() runs callbacks. Code called from outside a turn (set-up, tests) may
  // refresh_now() first so that deadlines do not start from a stale turn time.
  bool in_turn() const { return in_turn_; }

  // --- submissions (loop thread). Each returns false, submitting nothing, when the op cap is
  // reached (LoopStats::in_flight == cq_entries); the caller treats that as ENOBUFS. ---------
  [[nodiscard]] bool recv(IoOp* op, FileRef fd, void* buf, size_t len, int flags = 0);
  [[nodiscard]] bool send(IoOp* op, FileRef fd, const void* buf, size_t len,
                          int flags = MSG_NOSIGNAL);
  [[nodiscard]] bool writev(IoOp* op, FileRef fd, const ::iovec* iov, unsigned n);
  [[nodiscard]] bool sendmsg(IoOp* op, FileRef fd, const struct msghdr* msg,
                             int flags = MSG_NOSIGNAL);
  [[nodiscard]] bool read(IoOp* op, FileRef fd, void* buf, size_t len);
  [[nodiscard]] bool connect(IoOp* op, FileRef fd, const sockaddr* addr, socklen_t len);
  [[nodiscard]] bool accept(IoOp* op, int fd, sockaddr* addr, socklen_t* len,
                            int flags = SOCK_NONBLOCK | SOCK_CLOEXEC);
  [[nodiscard]] bool close(IoOp* op, int fd);
  // Multishot receive into buffers of provided-buffer group `group` (net/buffer_ring.h):
  // one completion per chunk (IORING_CQE_F_BUFFER, buffer id = flags >> 16) while
  // IORING_CQE_F_MORE is set; it ends with EOF (0), an error, or -ENOBUFS (re-arm then).
  [[nodiscard]] bool recv_multishot(IoOp* op, FileRef fd, uint16_t group);
  uint16_t alloc_buffer_group() { return next_buffer_group_++; }
  // One-shot poll for `mask` (POLLIN, POLLOUT, ...); res is the ready mask or -errno.
  [[nodiscard]] bool poll(IoOp* op, FileRef fd, unsigned mask);
  // Kernel timeout (IORING_OP_TIMEOUT); prefer arm() for deadlines. res: -ETIME when it fired.
  // `ts` must stay valid until the next run_once() has submitted it.
  [[nodiscard]] bool kernel_timeout(IoOp* op, const ::__kernel_timespec* ts);
  // Cancels `target` if still in flight (it completes with -ECANCELED, or normally if it raced).
  // The cancel request itself completes silently. Never fails for lack of capacity.
  void cancel(IoOp* target);
  // Cancels every op on `fd` (IORING_ASYNC_CANCEL_FD | ALL), silently.
  void cancel_fd(FileRef fd);
  // Registered files: a slot for `fd` (-1 when the table is full or unsupported; use the fd
  // then). unregister_fd() before closing the fd, after its last op completed.
  int register_fd(int fd);
  void unregister_fd(int slot);
  // Raw access for ops the helpers do not cover (multishot recv, buffer rings, splice, ...):
  // returns an SQE with user_data = op, counted in flight, or nullptr at the op cap.
  io_uring_sqe* raw_sqe(IoOp* op);
  io_uring* ring() { return ring_.get(); }

  // --- timers (loop thread) -----------------------------------------------------------------
  void arm(Timer* t, MonoTime deadline);  // re-arming moves it
  void arm_after(Timer* t, Duration d) { arm(t, now_ + d); }
  void disarm(Timer* t);  // no-op when not armed
  size_t timers_armed() const { return heap_.size(); }

  // --- tasks ----------------------------------------------------------------------------------
  void defer(Task* t);                  // loop thread: runs next turn, FIFO
  void post(Task* t);                   // any thread: MPSC, runs on the loop thread
  void post(std::function<void()> fn);  // any thread; allocates (not for the hot path)
  void wake();                          // any thread: makes a blocked run_once() return
  void stop();                          // any thread: run() returns after this turn

  // --- driving (loop thread) ------------------------------------------------------------------
  // One turn: run tasks, fire due timers, submit, wait at most `max_wait` (less when a timer
  // is due or work is pending; 0 = poll), reap completions. Returns the number of
  // completions + timers + tasks handled.
  size_t run_once(Duration max_wait = milliseconds(100));
  void run();  // until stop()
  bool stopping() const { return stop_.load(std::memory_order_acquire); }

  uint32_t in_flight() const { return in_flight_; }
  unsigned cq_capacity() const { return cq_cap_; }
  unsigned setup_flags() const { return setup_flags_; }  // the IORING_SETUP_* that took
  const LoopStats& stats() const;

 private:
  struct RingDeleter {
    void operator()(io_uring* r) const;
  };
  class WakeOp;
  explicit Loop(const LoopOptions& options);
  Result<void> init();
  void enable_ring();
  io_uring_sqe* get_sqe();  // flushes a full SQ; never null
  io_uring_sqe* op_sqe();
  void arm_wake_read();
  size_t run_tasks();
  Task* mpsc_pop();
  size_t fire_timers();
  size_t reap();
  void submit_and_wait(Duration wait);
  void heap_up(uint32_t i);
  void heap_down(uint32_t i);
  void heap_remove(uint32_t i);
  bool heap_less(const Timer* a, const Timer* b) const;

  LoopOptions options_;
  std::unique_ptr<Clock> owned_clock_;
  Clock* clock_ = nullptr;
  std::unique_ptr<io_uring, RingDeleter> ring_;
  unsigned setup_flags_ = 0;
  bool ring_enabled_ = false;
  bool in_turn_ = false;
  uint16_t next_buffer_group_ = 1;
  std::vector<int> free_file_slots_;  // registered file table (empty: none or full)
  unsigned cq_cap_ = 0;
  uint32_t in_flight_ = 0;
  unsigned unsubmitted_ = 0;
  MonoTime now_;
  WallTime wall_now_;  // never decreases (refresh_now)
  bool wall_started_ = false;

  std::vector<Timer*> heap_;
  uint64_t timer_seq_ = 0;

  Task* local_head_ = nullptr;  // deferred tasks (loop thread only)
  Task* local_tail_ = nullptr;

  // Vyukov intrusive MPSC queue for post(); stub_ is the permanent dummy node.
  class StubTask;
  std::unique_ptr<StubTask> stub_;
  std::atomic<Task*> mpsc_head_;  // producers exchange here
  Task* mpsc_tail_ = nullptr;     // consumer side

  int event_fd_ = -1;
  std::unique_ptr<WakeOp> wake_op_;
  uint64_t wake_buf_ = 0;
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stop_{false};
  mutable LoopStats stats_;
  std::atomic<uint64_t> posts_{0};
  std::atomic<uint64_t> wakeups_{0};
  std::thread::id owner_;
};

}  // namespace ringcast::net
