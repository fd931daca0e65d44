#include "storage/payload_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "storage/status.h"

namespace ringcast::storage {
namespace {

constexpr SegmentDir::Messages kMessages = {"cannot create, open or list the payload log directory",
                                            "cannot create a payload log segment",
                                            "cannot remove a payload log segment"};

}  // namespace

PayloadLog::PayloadLog(SegmentDir files, uint64_t segment_bytes)
    : files_(std::move(files)), segment_bytes_(std::max<uint64_t>(segment_bytes, 4096)) {}

PayloadLog::~PayloadLog() {
  for (auto& [n, s] : segments_) {
    if (s.fd >= 0) ::close(s.fd);
  }
}

Result<std::unique_ptr<PayloadLog>> PayloadLog::open(const std::string& dir,
                                                     uint64_t segment_bytes) {
  std::vector<uint64_t> found;
  auto files = SegmentDir::open(dir, ".plog", kMessages, found);
  if (!files) return files.error();
  std::unique_ptr<PayloadLog> log(new PayloadLog(std::move(*files), segment_bytes));
  uint64_t newest = 0;
  std::unique_lock map(log->map_mu_);
  for (uint64_t n : found) {
    const int fd = ::open(log->files_.path_of(n).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open a payload log segment");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return io_error("cannot stat a payload log segment");
    }
    Segment& s = log->segments_[n];
    s.fd = fd;
    s.size.store(static_cast<uint64_t>(st.st_size));
    newest = std::max(newest, n);
  }
  // What an earlier run appended may be only in the page cache (a killed process): the first
  // sync() covers those segments too, and RocksStore syncs once at open, before it answers from
  // what it recovered.
  log->dirty_ = found;
  log->dir_dirty_ = true;
  if (auto r = log->start_segment(newest + 1); !r) return r.error();
  return log;
}

Result<void> PayloadLog::start_segment(uint64_t number) {
  auto fd = files_.create(number);
  if (!fd) return fd.error();
  Segment& s = segments_[number];
  s.fd = *fd;
  active_ = number;
  dirty_.push_back(number);
  dir_dirty_ = true;
  return ok();
}

Result<void> PayloadLog::append(const std::vector<std::string_view>& payloads, uint64_t stamp,
                                std::vector<PayloadRef>& refs) {
  refs.resize(payloads.size());
  uint64_t total = 0;
  for (std::string_view p : payloads) total += p.size();
  std::lock_guard lock(append_mu_);
  Segment* seg;
  {
    std::shared_lock map(map_mu_);
    seg = &segments_.at(active_);
  }
  if (seg->size.load(std::memory_order_relaxed) > 0 &&
      seg->size.load(std::memory_order_relaxed) + total > segment_bytes_) {
    std::unique_lock map(map_mu_);
    if (auto r = start_segment(active_ + 1); !r) return r.error();
    seg = &segments_.at(active_);
  }
  const uint64_t start = seg->size.load(std::memory_order_relaxed);
  uint64_t offset = start;
  for (size_t i = 0; i < payloads.size(); ++i) {
    refs[i] = {active_, offset, static_cast<uint32_t>(payloads[i].size())};
    offset += payloads[i].size();
  }
  // pwritev in chunks of IOV_MAX; a short write continues where it stopped.
  std::vector<iovec> iov;
  iov.reserve(std::min<size_t>(payloads.size(), IOV_MAX));
  uint64_t at = start;
  for (size_t i = 0; i < payloads.size();) {
    iov.clear();
    for (; i < payloads.size() && iov.size() < IOV_MAX; ++i) {
      if (!payloads[i].empty())
        iov.push_back({const_cast<char*>(payloads[i].data()), payloads[i].size()});
    }
    size_t first = 0;
    while (first < iov.size()) {
      const ssize_t n = ::pwritev(seg->fd, iov.data() + first, static_cast<int>(iov.size() - first),
                                  static_cast<off_t>(at));
      if (n < 0) {
        if (errno == EINTR) continue;
        return io_error("cannot write the payload log", errno);
      }
      at += static_cast<uint64_t>(n);
      size_t left = static_cast<size_t>(n);
      while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (left > 0) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
  }
  seg->size.store(at, std::memory_order_release);
  if (stamp > seg->stamp.load(std::memory_order_relaxed))
    seg->stamp.store(stamp, std::memory_order_relaxed);
  if (dirty_.empty() || dirty_.back() != active_) dirty_.push_back(active_);
  return ok();
}

Result<void> PayloadLog::read(const PayloadRef& ref, std::string& out) const {
  out.resize(ref.size);
  std::shared_lock map(map_mu_);
  auto it = segments_.find(ref.segment);
  if (it == segments_.end())
    return make_error(Errc::kCorruption, "event payload: its log segment is gone");
  size_t done = 0;
  while (done < ref.size) {
    const ssize_t n = ::pread(it->second.fd, out.data() + done, ref.size - done,
                              static_cast<off_t>(ref.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read the payload log");
    }
    if (n == 0) return make_error(Errc::kCorruption, "event payload: its log segment is short");
    done += static_cast<size_t>(n);
  }
  return ok();
}

Result<void> PayloadLog::sync() {
  std::vector<uint64_t> todo;
  bool dir;
  {
    std::lock_guard lock(append_mu_);
    todo.swap(dirty_);
    dir = std::exchange(dir_dirty_, false);
  }
  // A sync that fails leaves what it did not sync dirty: a read-only filesystem refuses it
  // whole, and the next sync asks again (after any other failure the store stops: RocksStore).
  auto keep_dirty = [&](size_t from) {
    std::lock_guard lock(append_mu_);
    dirty_.insert(dirty_.begin(), todo.begin() + static_cast<ptrdiff_t>(from), todo.end());
    dir_dirty_ = dir_dirty_ || dir;
  };
  std::shared_lock map(map_mu_);
  for (size_t i = 0; i < todo.size(); ++i) {
    auto it = segments_.find(todo[i]);
    if (it != segments_.end() && ::fdatasync(it->second.fd) != 0) {
      const int err = errno;
      keep_dirty(i);
      return io_error("cannot sync the payload log", err);
    }
  }
  if (dir) {
    if (auto r = files_.sync(); !r) {
      keep_dirty(todo.size());
      return r;
    }
  }
  return ok();
}

uint64_t PayloadLog::active_segment() const {
  std::lock_guard lock(append_mu_);
  return active_;
}

std::vector<std::pair<uint64_t, uint64_t>> PayloadLog::segments() const {
  std::shared_lock map(map_mu_);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(segments_.size());
  for (const auto& [n, s] : segments_) out.emplace_back(n, s.stamp.load());
  return out;
}

uint64_t PayloadLog::segment_size(uint64_t segment) const {
  std::shared_lock map(map_mu_);
  auto it = segments_.find(segment);
  return it == segments_.end() ? 0 : it->second.size.load(std::memory_order_acquire);
}

void PayloadLog::raise_stamps(uint64_t stamp) {
  std::lock_guard lock(append_mu_);
  std::shared_lock map(map_mu_);
  for (auto& [n, s] : segments_) {
    if (n != active_ && s.stamp.load() < stamp) s.stamp.store(stamp);
  }
}

uint64_t PayloadLog::bytes() const {
  std::shared_lock map(map_mu_);
  uint64_t total = 0;
  for (const auto& [n, s] : segments_) total += s.size.load(std::memory_order_acquire);
  return total;
}

Result<void> PayloadLog::remove(uint64_t segment) {
  std::lock_guard lock(append_mu_);
  if (segment == active_)
    return make_error(Errc::kInvalidArgument, "the active payload segment cannot be removed");
  std::unique_lock map(map_mu_);
  auto it = segments_.find(segment);
  if (it == segments_.end()) return ok();
  if (auto r = files_.remove(segment); !r) return r;
  ::close(it->second.fd);
  segments_.erase(it);
  std::erase(dirty_, segment);
  dir_dirty_ = true;
  return ok();
}

}  // namespace ringcast::storage
