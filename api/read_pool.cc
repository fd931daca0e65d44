#include "api/read_pool.h"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

namespace ringcast::api {

ReadPool::ReadPool(ReadPoolOptions options) : options_(options) {
  uint32_t n = std::max<uint32_t>(1, options_.threads);
  workers_.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    workers_.emplace_back([this, i] {
      std::string name = options_.name;
      name += '-';
      name += std::to_string(i);
      ::pthread_setname_np(::pthread_self(), name.c_str());
      run();
    });
  }
}

ReadPool::~ReadPool() {
  stop();
}

ReadPool::Submit ReadPool::submit(Work work, Responder& responder) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Submit::kStopped;
    if (queue_.size() >= options_.max_queued) return Submit::kFull;
    queue_.push_back(Job{std::move(work), std::move(responder)});
  }
  cv_.notify_one();
  return Submit::kQueued;
}

void ReadPool::stop() {
  std::lock_guard stop_lock(stop_mu_);
  std::deque<Job> left;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  // Queued reads are refused rather than run: the engine behind them is about to go away.
  for (Job& j : left) j.responder.send(stopped_response());
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

size_t ReadPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void ReadPool::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;  // stop() answers what is still queued
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    HttpResponse r;
    try {
      r = job.work();
    } catch (const std::exception& e) {  // e.g. bad_alloc: answer, do not take the server down
      r = HttpResponse::error(500, "internal", e.what());
    }
    job.responder.send(std::move(r));
  }
}

HttpResponse ReadPool::overloaded_response() {
  HttpResponse r = HttpResponse::error(
      503, "overloaded", "too many delivery-log reads are waiting; retry in a moment");
  r.headers.push_back({"Retry-After", "1"});
  return r;
}

HttpResponse ReadPool::stopped_response() {
  HttpResponse r = HttpResponse::error(503, "shutting_down", "the server is shutting down");
  r.headers.push_back({"Retry-After", "1"});
  return r;
}

}  // namespace ringcast::api
