#include "node/services.h"

#include <utility>

namespace ringcast::node {

Result<void> Services::start(std::string name, const std::function<Result<void>()>& start,
                             std::function<void()> stop) {
  Result<void> r = start();
  if (!r.ok()) return r;
  started_.push_back({std::move(name), std::move(stop)});
  return ok();
}

void Services::stop_all() {
  while (!started_.empty()) {
    Started last = std::move(started_.back());
    started_.pop_back();
    if (last.stop) last.stop();
  }
}

std::vector<std::string> Services::running() const {
  std::vector<std::string> out;
  out.reserve(started_.size());
  for (const Started& s : started_) out.push_back(s.name);
  return out;
}

}  // namespace ringcast::node
