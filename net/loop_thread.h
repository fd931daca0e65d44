// A thread that owns a net::Loop (the Redis intake source, the lease manager): a mailbox that
// other threads post into while the loop exists, and a start that returns once the thread's
// init() answered. Invariants: a post after the loop is gone is dropped (the owner detaches
// the mailbox before the loop is destroyed); start_loop_thread() returns only after init()
// ran, and when init() failed the thread has already ended and been joined.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/result.h"
#include "net/loop.h"

namespace ringcast::net {

// Posts reach the loop only while it exists: the owner sets `loop` once it is created and
// clears it (under the lock) before destroying it.
struct Mailbox {
  std::mutex mu;
  Loop* loop = nullptr;
  void post(std::function<void()> fn) {
    std::lock_guard lock(mu);
    if (loop) loop->post(std::move(fn));
  }
  void detach() {
    std::lock_guard lock(mu);
    loop = nullptr;
  }
};

// Starts `thread` named `name` (15 characters at most): it runs init() and, if that
// succeeded, run(). Returns init()'s answer once it is known; on an error the thread is joined.
inline Result<void> start_loop_thread(std::thread& thread, const char* name,
                                      std::function<Result<void>()> init,
                                      std::function<void()> run) {
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  Result<void> answer = ok();
  thread = std::thread([&, name, init = std::move(init), run = std::move(run)] {
    ::pthread_setname_np(::pthread_self(), name);
    Result<void> r = init();
    {
      std::lock_guard lock(mu);
      answer = r;
      ready = true;
      cv.notify_all();  // under the lock: the caller's cv may go as soon as it is released
    }
    // From here on nothing of the caller's frame is touched: it may have returned.
    if (r.ok()) run();
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return ready; });
  }
  if (!answer.ok()) thread.join();
  return answer;
}

}  // namespace ringcast::net
