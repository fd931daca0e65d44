#include "net/loop.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "net/system_clock.h"

namespace ringcast::net {

namespace {
// CQ slots kept free for completions the cap does not count: cancel requests (user_data 0).
constexpr unsigned kCqReserve = 64;
constexpr uint64_t kIgnoredUserData = 0;

class FunctionTask final : public Task {
 public:
  explicit FunctionTask(std::function<void()> fn) : fn_(std::move(fn)) {}
  void run() override {
    auto fn = std::move(fn_);
    delete this;
    fn();
  }

 private:
  std::function<void()> fn_;
};
}  // namespace

class Loop::StubTask final : public Task {
 public:
  void run() override {}
};

// Keeps one read on the eventfd in flight; each completion means "someone called wake()".
class Loop::WakeOp final : public IoOp {
 public:
  explicit WakeOp(Loop* loop) : loop_(loop) {}
  void complete(int, uint32_t) override { loop_->arm_wake_read(); }

 private:
  Loop* loop_;
};

void Loop::RingDeleter::operator()(io_uring* r) const {
  io_uring_queue_exit(r);
  delete r;
}

Loop::Loop(const LoopOptions& options)
    : options_(options), stub_(std::make_unique<StubTask>()), mpsc_head_(stub_.get()) {
  mpsc_tail_ = stub_.get();
  if (options_.clock != nullptr) {
    clock_ = options_.clock;
  } else {
    owned_clock_ = std::make_unique<SystemClock>();
    clock_ = owned_clock_.get();
  }
  refresh_now();
}

Loop::~Loop() {
  // Tasks still queued never run; the functions post() wrapped are the loop's to free (a
  // caller's own Task is the caller's). A loop is destroyed with some queued when its thread
  // ended without another turn (a crash in the simulation, a failed start).
  auto discard = [](Task* t) {
    if (auto* f = dynamic_cast<FunctionTask*>(t)) delete f;
  };
  while (local_head_ != nullptr) {
    Task* t = local_head_;
    local_head_ = t->next_.load(std::memory_order_relaxed);
    discard(t);
  }
  while (Task* t = mpsc_pop()) discard(t);
  ring_.reset();  // cancels whatever is in flight; complete() is not called
  if (event_fd_ >= 0) ::close(event_fd_);
}

Result<std::unique_ptr<Loop>> Loop::create(const LoopOptions& options) {
  std::unique_ptr<Loop> loop(new Loop(options));
  if (auto r = loop->init(); !r) return r.error();
  return loop;
}

Result<void> Loop::init() {
  auto ring = std::make_unique<io_uring>();
  // R_DISABLED: the ring is enabled by the first run_once(), so the thread that drives the
  // loop becomes the single issuer even if the loop was created on another thread.
  const unsigned base = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
  const unsigned attempts[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
      IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
      0,
  };
  int rc = -EINVAL;
  for (unsigned extra : attempts) {
    if (!options_.try_single_issuer && extra != 0) continue;
    io_uring_params p{};
    p.flags = base | extra;
    p.cq_entries = options_.cq_entries;
    rc = io_uring_queue_init_params(options_.sq_entries, ring.get(), &p);
    if (rc == -EINVAL) {  // an older kernel: drop SUBMIT_ALL too
      p = io_uring_params{};
      p.flags = IORING_SETUP_CQSIZE | extra;
      p.cq_entries = options_.cq_entries;
      rc = io_uring_queue_init_params(options_.sq_entries, ring.get(), &p);
    }
    if (rc == 0) {
      setup_flags_ = p.flags;
      cq_cap_ = p.cq_entries > 2 * kCqReserve ? p.cq_entries - kCqReserve : p.cq_entries / 2;
      break;
    }
  }
  if (rc != 0) {
    Error e = make_error(Errc::kIo, "io_uring_queue_init_params failed");
    e.sys_errno = -rc;
    return e;
  }
  ring_.reset(ring.release());
  ring_enabled_ = (setup_flags_ & IORING_SETUP_R_DISABLED) == 0;

  if (options_.registered_files > 0 &&
      io_uring_register_files_sparse(ring_.get(), options_.registered_files) == 0) {
    free_file_slots_.reserve(options_.registered_files);
    for (int i = static_cast<int>(options_.registered_files) - 1; i >= 0; --i) {
      free_file_slots_.push_back(i);
    }
  }
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) {
    Error e = make_error(Errc::kIo, "eventfd failed");
    e.sys_errno = errno;
    return e;
  }
  wake_op_ = std::make_unique<WakeOp>(this);
  arm_wake_read();
  return ok();
}

void Loop::refresh_now() {
  const MonoTime mono = clock_->mono_now();
  const WallTime real = clock_->wall_now();
  // The loop's wall clock never runs backwards (docs/operations.md "Clock jumps"): everything
  // due (retries, breaker pauses, Retry-After holds, rate-limit tokens) is kept in wall time, and
  // a step back would hold it for the length of the step. While the system clock is behind the
  // loop's, the loop's runs on at half speed (monotonic time), so the system clock catches up
  // after twice the step and pauses meanwhile last at most twice as long; a step forward is
  // taken at once.
  if (!wall_started_ || real >= wall_now_) {
    wall_now_ = real;
  } else {
    const Duration elapsed = mono - now_;
    if (elapsed > Duration::zero()) wall_now_ += elapsed / 2;
    if (wall_now_ < real) wall_now_ = real;
  }
  wall_started_ = true;
  now_ = mono;
}

const LoopStats& Loop::stats() const {
  stats_.posts = posts_.load(std::memory_order_relaxed);
  stats_.wakeups = wakeups_.load(std::memory_order_relaxed);
  stats_.in_flight = in_flight_;
  return stats_;
}

// --- submissions ------------------------------------------------------------------------------

// Binds the ring to the calling thread (the single issuer). Debian's liburing 2.3 declares
// io_uring_enable_rings() but does not export it, hence the raw register call.
void Loop::enable_ring() {
  if (owner_ == std::thread::id()) owner_ = std::this_thread::get_id();
  if (ring_enabled_) return;
  io_uring_register(ring_->ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
  ring_enabled_ = true;
  // Saves the ring fd lookup on every io_uring_enter (per thread: the issuer's).
  io_uring_register_ring_fd(ring_.get());
}

io_uring_sqe* Loop::get_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  while (sqe == nullptr) {
    // SQ full: flush it. Before the first run_once() the ring may still be disabled; enable
    // it here (the caller is then the issuer, which is the loop thread by contract).
    enable_ring();
    io_uring_submit(ring_.get());
    stats_.submits++;
    unsubmitted_ = 0;
    sqe = io_uring_get_sqe(ring_.get());
  }
  unsubmitted_++;
  return sqe;
}

io_uring_sqe* Loop::op_sqe() {
  if (in_flight_ >= cq_cap_) return nullptr;
  io_uring_sqe* sqe = get_sqe();
  in_flight_++;
  if (in_flight_ > stats_.in_flight_max) stats_.in_flight_max = in_flight_;
  return sqe;
}

io_uring_sqe* Loop::raw_sqe(IoOp* op) {
  RC_CHECK(op != nullptr);
  io_uring_sqe* sqe = op_sqe();
  if (sqe != nullptr) io_uring_sqe_set_data(sqe, op);
  return sqe;
}

bool Loop::recv(IoOp* op, FileRef fd, void* buf, size_t len, int flags) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_recv(sqe, fd.index, buf, len, flags);
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::send(IoOp* op, FileRef fd, const void* buf, size_t len, int flags) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_send(sqe, fd.index, buf, len, flags);
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::writev(IoOp* op, FileRef fd, const ::iovec* iov, unsigned n) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_writev(sqe, fd.index, iov, n, 0);
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::sendmsg(IoOp* op, FileRef fd, const struct msghdr* msg, int flags) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_sendmsg(sqe, fd.index, msg, static_cast<unsigned>(flags));
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::read(IoOp* op, FileRef fd, void* buf, size_t len) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_read(sqe, fd.index, buf, static_cast<unsigned>(len), 0);
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::connect(IoOp* op, FileRef fd, const sockaddr* addr, socklen_t len) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_connect(sqe, fd.index, addr, len);
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::accept(IoOp* op, int fd, sockaddr* addr, socklen_t* len, int flags) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_accept(sqe, fd, addr, len, flags);
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::close(IoOp* op, int fd) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_close(sqe, fd);
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::recv_multishot(IoOp* op, FileRef fd, uint16_t group) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_recv_multishot(sqe, fd.index, nullptr, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = group;
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::poll(IoOp* op, FileRef fd, unsigned mask) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_poll_add(sqe, fd.index, mask);
  if (fd.fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
  return true;
}

bool Loop::kernel_timeout(IoOp* op, const ::__kernel_timespec* ts) {
  io_uring_sqe* sqe = op_sqe();
  if (sqe == nullptr) return false;
  io_uring_prep_timeout(sqe, const_cast<__kernel_timespec*>(ts), 0, 0);
  io_uring_sqe_set_data(sqe, op);
  return true;
}

void Loop::cancel(IoOp* target) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_cancel64(sqe, reinterpret_cast<uint64_t>(target), 0);
  io_uring_sqe_set_data64(sqe, kIgnoredUserData);
}

void Loop::cancel_fd(FileRef fd) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_cancel_fd(sqe, fd.index,
                          IORING_ASYNC_CANCEL_ALL | (fd.fixed ? IORING_ASYNC_CANCEL_FD_FIXED : 0));
  io_uring_sqe_set_data64(sqe, kIgnoredUserData);
}

int Loop::register_fd(int fd) {
  if (free_file_slots_.empty()) return -1;
  const int slot = free_file_slots_.back();
  if (io_uring_register_files_update(ring_.get(), static_cast<unsigned>(slot), &fd, 1) != 1) {
    return -1;
  }
  free_file_slots_.pop_back();
  return slot;
}

void Loop::unregister_fd(int slot) {
  int none = -1;
  io_uring_register_files_update(ring_.get(), static_cast<unsigned>(slot), &none, 1);
  free_file_slots_.push_back(slot);
}

void Loop::arm_wake_read() {
  // Capacity for the wake read is always there: it is the first op and re-arms itself.
  io_uring_sqe* sqe = get_sqe();
  in_flight_++;
  io_uring_prep_read(sqe, event_fd_, &wake_buf_, sizeof(wake_buf_), 0);
  io_uring_sqe_set_data(sqe, static_cast<IoOp*>(wake_op_.get()));
}

// --- timers: a binary min-heap on (deadline, seq), index stored in the timer ----------------

bool Loop::heap_less(const Timer* a, const Timer* b) const {
  if (a->deadline_ != b->deadline_) return a->deadline_ < b->deadline_;
  return a->seq_ < b->seq_;
}

void Loop::heap_up(uint32_t i) {
  Timer* t = heap_[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (!heap_less(t, heap_[parent])) break;
    heap_[i] = heap_[parent];
    heap_[i]->heap_index_ = i;
    i = parent;
  }
  heap_[i] = t;
  t->heap_index_ = i;
}

void Loop::heap_down(uint32_t i) {
  const uint32_t n = static_cast<uint32_t>(heap_.size());
  Timer* t = heap_[i];
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_less(heap_[child + 1], heap_[child])) child++;
    if (!heap_less(heap_[child], t)) break;
    heap_[i] = heap_[child];
    heap_[i]->heap_index_ = i;
    i = child;
  }
  heap_[i] = t;
  t->heap_index_ = i;
}

void Loop::heap_remove(uint32_t i) {
  Timer* removed = heap_[i];
  Timer* last = heap_.back();
  heap_.pop_back();
  removed->heap_index_ = Timer::kNotArmed;
  if (removed == last) return;
  heap_[i] = last;
  last->heap_index_ = i;
  heap_up(i);
  heap_down(last->heap_index_);
}

void Loop::arm(Timer* t, MonoTime deadline) {
  if (t->armed()) heap_remove(t->heap_index_);
  t->deadline_ = deadline;
  t->seq_ = timer_seq_++;
  heap_.push_back(t);
  heap_up(static_cast<uint32_t>(heap_.size() - 1));
}

void Loop::disarm(Timer* t) {
  if (t->armed()) heap_remove(t->heap_index_);
}

size_t Loop::fire_timers() {
  size_t fired = 0;
  while (!heap_.empty() && fired < options_.max_timers_per_turn) {
    Timer* t = heap_.front();
    if (t->deadline_ > now_) break;
    heap_remove(0);
    fired++;
    t->on_timer();
  }
  stats_.timers_fired += fired;
  return fired;
}

// --- tasks --------------------------------------------------------------------------------------

void Loop::defer(Task* t) {
  t->next_.store(nullptr, std::memory_order_relaxed);
  if (local_tail_ != nullptr) {
    local_tail_->next_.store(t, std::memory_order_relaxed);
  } else {
    local_head_ = t;
  }
  local_tail_ = t;
}

void Loop::post(Task* t) {
  t->next_.store(nullptr, std::memory_order_relaxed);
  Task* prev = mpsc_head_.exchange(t, std::memory_order_acq_rel);
  prev->next_.store(t, std::memory_order_release);
  posts_.fetch_add(1, std::memory_order_relaxed);
  wake();
}

void Loop::post(std::function<void()> fn) {
  post(new FunctionTask(std::move(fn)));
}

void Loop::wake() {
  if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;
  uint64_t one = 1;
  ssize_t n = ::write(event_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: a wake-up is pending anyway
  wakeups_.fetch_add(1, std::memory_order_relaxed);
}

void Loop::stop() {
  stop_.store(true, std::memory_order_release);
  wake();
}

// Vyukov's intrusive MPSC queue, consumer side. nullptr when empty or when a producer is
// between its exchange and its link (it wakes the loop right after).
Task* Loop::mpsc_pop() {
  Task* stub = stub_.get();
  Task* tail = mpsc_tail_;
  Task* next = tail->next_.load(std::memory_order_acquire);
  if (tail == stub) {
    if (next == nullptr) return nullptr;
    mpsc_tail_ = next;
    tail = next;
    next = next->next_.load(std::memory_order_acquire);
  }
  if (next != nullptr) {
    mpsc_tail_ = next;
    return tail;
  }
  if (tail != mpsc_head_.load(std::memory_order_acquire)) return nullptr;
  stub->next_.store(nullptr, std::memory_order_relaxed);
  Task* prev = mpsc_head_.exchange(stub, std::memory_order_acq_rel);
  prev->next_.store(stub, std::memory_order_release);
  next = tail->next_.load(std::memory_order_acquire);
  if (next == nullptr) return nullptr;
  mpsc_tail_ = next;
  return tail;
}

size_t Loop::run_tasks() {
  size_t ran = 0;
  const size_t max = options_.max_tasks_per_turn;
  // Deferred tasks first: only those queued before this point run this turn.
  Task* end = local_tail_;
  while (local_head_ != nullptr && ran < max) {
    Task* t = local_head_;
    local_head_ = t->next_.load(std::memory_order_relaxed);
    if (local_head_ == nullptr) local_tail_ = nullptr;
    ran++;
    const bool last = (t == end);
    t->run();
    if (last) break;
  }
  // Posted tasks: clear the wake flag first so a producer racing with the drain wakes us.
  wake_pending_.store(false, std::memory_order_release);
  while (ran < max) {
    Task* t = mpsc_pop();
    if (t == nullptr) break;
    ran++;
    t->run();
  }
  stats_.tasks_run += ran;
  return ran;
}

// --- the turn --------------------------------------------------------------------------------

void Loop::submit_and_wait(Duration wait) {
  io_uring* r = ring_.get();
  if (wait <= Duration::zero()) {
    if (unsubmitted_ > 0 || (setup_flags_ & IORING_SETUP_DEFER_TASKRUN) != 0 ||
        io_uring_cq_ready(r) == 0) {
      io_uring_submit_and_get_events(r);
      stats_.submits++;
    }
  } else if (wait == Duration::max()) {
    io_uring_submit_and_wait(r, 1);
    stats_.submits++;
  } else {
    __kernel_timespec ts{};
    const int64_t ns = wait.count();
    ts.tv_sec = ns / 1'000'000'000;
    ts.tv_nsec = ns % 1'000'000'000;
    io_uring_cqe* cqe = nullptr;
    io_uring_submit_and_wait_timeout(r, &cqe, 1, &ts, nullptr);
    stats_.submits++;
  }
  unsubmitted_ = 0;
}

size_t Loop::reap() {
  struct Done {
    uint64_t user_data;
    int res;
    uint32_t flags;
  };
  // Copy the batch out and free the CQ slots first, so callbacks can submit freely.
  constexpr unsigned kBatch = 256;
  Done batch[kBatch];
  size_t total = 0;
  io_uring* r = ring_.get();
  while (total < options_.max_cqes_per_turn) {
    unsigned n = 0;
    unsigned head;
    io_uring_cqe* cqe;
    const size_t want = std::min<size_t>(kBatch, options_.max_cqes_per_turn - total);
    io_uring_for_each_cqe(r, head, cqe) {
      if (n == want) break;
      batch[n++] = Done{cqe->user_data, cqe->res, cqe->flags};
    }
    if (n == 0) break;
    io_uring_cq_advance(r, n);
    for (unsigned i = 0; i < n; ++i) {
      const Done& d = batch[i];
      if (d.user_data == kIgnoredUserData) continue;
      if ((d.flags & IORING_CQE_F_MORE) == 0) {
        RC_CHECK(in_flight_ > 0);
        in_flight_--;
      }
      reinterpret_cast<IoOp*>(d.user_data)->complete(d.res, d.flags);
    }
    total += n;
    if (n < want) break;
  }
  stats_.cqes += total;
  return total;
}

size_t Loop::run_once(Duration max_wait) {
  enable_ring();
  RC_CHECK(owner_ == std::this_thread::get_id());
  stats_.turns++;

  Duration wait = max_wait;
  const bool posted_pending =
      mpsc_tail_->next_.load(std::memory_order_acquire) != nullptr || mpsc_tail_ != stub_.get();
  if (local_head_ != nullptr || posted_pending || io_uring_cq_ready(ring_.get()) > 0 ||
      stopping()) {
    wait = Duration::zero();
  } else if (!heap_.empty()) {
    refresh_now();
    Duration until = heap_.front()->deadline_ - now_;
    if (until < wait) wait = until < Duration::zero() ? Duration::zero() : until;
  }
  submit_and_wait(wait);
  refresh_now();

  in_turn_ = true;
  size_t handled = reap();
  handled += run_tasks();
  handled += fire_timers();
  in_turn_ = false;
  return handled;
}

void Loop::run() {
  while (!stopping()) run_once(seconds(1));
  stop_.store(false, std::memory_order_release);
}

}  // namespace ringcast::net
