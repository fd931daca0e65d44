// The parts of a running node as services of one shape (docs/architecture.md "The node"): each
// is started once, and stopped once, in the reverse of the order the parts were started in — a
// part is started after everything it uses and so stopped before it. A start that fails stops
// nothing of itself (it did not run) and leaves the parts started before it to stop_all().
// Not thread-safe: one thread starts and stops a node.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/result.h"

namespace ringcast::node {

class Services {
 public:
  Services() = default;
  Services(const Services&) = delete;
  Services& operator=(const Services&) = delete;
  ~Services() { stop_all(); }

  // Runs `start`; once it succeeded, `stop` belongs to the started services. An error from
  // `start` is returned as it is, and `stop` is dropped.
  Result<void> start(std::string name, const std::function<Result<void>()>& start,
                     std::function<void()> stop);
  // Stops every started service, the last one started first; each once. Idempotent.
  void stop_all();
  // The started services' names, in start order (for the tests and the start-up log).
  std::vector<std::string> running() const;

 private:
  struct Started {
    std::string name;
    std::function<void()> stop;
  };
  std::vector<Started> started_;
};

}  // namespace ringcast::node
