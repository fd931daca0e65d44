#include "storage/lease_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>

#include "storage/codec.h"
#include "storage/status.h"

namespace ringcast::storage {
namespace {

// Entry: u32 body size | u32 check (low half of the body's xxh3) | body = u64 id | record.
// Integers big-endian (codec.h).
constexpr size_t kHeadBytes = 8;
constexpr size_t kIdBytes = 8;
constexpr uint32_t kMaxBody = 1 << 20;
constexpr SegmentDir::Messages kMessages = {"cannot create, open or list the lease log directory",
                                            "cannot create a lease log segment",
                                            "cannot remove a lease log segment"};

uint32_t check_of(const char* body, size_t n) {
  return static_cast<uint32_t>(XXH3_64bits(body, n));
}

// The entry at p (`avail` bytes from there): its size, with its delivery and record; 0 when it
// is short or fails its check.
size_t parse_entry(const char* p, size_t avail, DeliveryId& id, std::string_view& record) {
  if (avail < kHeadBytes) return 0;
  const uint32_t body = get_be32(p);
  if (body < kIdBytes || body > kMaxBody || kHeadBytes + body > avail) return 0;
  const char* b = p + kHeadBytes;
  if (check_of(b, body) != get_be32(p + 4)) return 0;
  id = get_be64(b);
  record = std::string_view(b + kIdBytes, body - kIdBytes);
  return kHeadBytes + body;
}

Result<void> pread_all(int fd, char* buf, size_t n, uint64_t at, size_t& got) {
  got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(at + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read the lease log");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return ok();
}

}  // namespace

void LeaseBatch::add(DeliveryId id, std::string_view record) {
  at_.emplace_back(id, static_cast<uint32_t>(buf_.size()));
  const size_t body = kIdBytes + record.size();
  const size_t at = buf_.size();
  put_be32(buf_, static_cast<uint32_t>(body));
  put_be32(buf_, 0);  // the check, once the body is in place
  put_be64(buf_, id);
  buf_.append(record);
  be32_at(buf_.data() + at + 4, check_of(buf_.data() + at + kHeadBytes, body));
}

void LeaseBatch::clear(size_t keep_bytes) {
  if (buf_.capacity() > keep_bytes) {
    std::string().swap(buf_);
    std::vector<std::pair<DeliveryId, uint32_t>>().swap(at_);
  }
  buf_.clear();
  at_.clear();
}

LeaseLog::LeaseLog(SegmentDir files, uint64_t segment_bytes)
    : files_(std::move(files)), segment_bytes_(std::max<uint64_t>(segment_bytes, 4096)) {}

LeaseLog::~LeaseLog() {
  for (auto& [n, s] : segments_) {
    if (s.fd >= 0) ::close(s.fd);
  }
}

Result<std::unique_ptr<LeaseLog>> LeaseLog::open(const std::string& dir, uint64_t segment_bytes) {
  std::vector<uint64_t> found;
  auto files = SegmentDir::open(dir, ".lease", kMessages, found);
  if (!files) return files.error();
  std::unique_ptr<LeaseLog> log(new LeaseLog(std::move(*files), segment_bytes));
  log->old_ = std::move(found);
  std::lock_guard lock(log->mu_);
  if (auto r = log->start_segment(log->old_.empty() ? 1 : log->old_.back() + 1); !r)
    return r.error();
  return log;
}

Result<void> LeaseLog::start_segment(uint64_t number) {
  auto fd = files_.create(number);
  if (!fd) return fd.error();
  const uint64_t prev = active_;
  segments_[number].fd = *fd;
  active_ = number;
  dirty_.push_back(number);
  dir_dirty_ = true;
  if (prev != 0) count_resolved();  // the previous active segment may now be removable
  return ok();
}

Result<std::unordered_map<DeliveryId, std::string>> LeaseLog::read_old() const {
  std::unordered_map<DeliveryId, std::string> out;
  std::string data;
  for (uint64_t n : old_) {
    const int fd = ::open(files_.path_of(n).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open a lease log segment");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return io_error("cannot stat a lease log segment");
    }
    data.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    auto r = pread_all(fd, data.data(), data.size(), 0, got);
    ::close(fd);
    if (!r) return r.error();
    data.resize(got);
    DeliveryId id;
    std::string_view record;
    for (size_t at = 0, n; (n = parse_entry(data.data() + at, data.size() - at, id, record));
         at += n)
      out[id].assign(record);
  }
  return out;
}

Result<void> LeaseLog::remove_old() {
  for (uint64_t n : old_) {
    if (auto r = files_.remove(n); !r) return r;
  }
  if (!old_.empty()) {
    if (auto r = files_.sync(); !r) return r;
  }
  old_.clear();
  return ok();
}

Result<void> LeaseLog::append(const LeaseBatch& batch) {
  if (batch.empty()) return ok();
  std::lock_guard lock(mu_);
  Segment* seg = &segments_.at(active_);
  if (seg->size > 0 && seg->size + batch.buf_.size() > segment_bytes_) {
    if (auto r = start_segment(active_ + 1); !r) return r.error();
    seg = &segments_.at(active_);
  }
  const uint64_t start = seg->size;
  size_t done = 0;
  while (done < batch.buf_.size()) {
    const ssize_t n = ::pwrite(seg->fd, batch.buf_.data() + done, batch.buf_.size() - done,
                               static_cast<off_t>(start + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write the lease log", errno);
    }
    done += static_cast<size_t>(n);
  }
  seg->size = start + done;
  for (size_t i = 0; i < batch.at_.size(); ++i) {
    const auto [id, off] = batch.at_[i];
    const size_t end = i + 1 < batch.at_.size() ? batch.at_[i + 1].second : batch.buf_.size();
    const Loc loc{active_, start + off, static_cast<uint32_t>(end - off)};
    auto [at, fresh] = live_.try_emplace(id, loc);
    if (!fresh) {  // a newer lease of the same attempt (e.g. a kill mark while in flight)
      auto old = segments_.find(at->segment);
      if (old != segments_.end()) --old->second.live;
      *at = loc;
    }
    ++seg->live;
  }
  live_count_.store(live_.size(), std::memory_order_release);
  if (dirty_.empty() || dirty_.back() != active_) dirty_.push_back(active_);
  count_resolved();
  return ok();
}

void LeaseLog::resolve(const DeliveryId* ids, size_t n) {
  if (n == 0 || live_count_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mu_);
  bool freed = false;
  for (size_t i = 0; i < n; ++i) {
    const Loc* at = live_.find(ids[i]);
    if (at == nullptr) continue;
    auto seg = segments_.find(at->segment);
    if (seg != segments_.end() && --seg->second.live == 0 && seg->first != active_) freed = true;
    live_.erase(ids[i]);
  }
  live_count_.store(live_.size(), std::memory_order_release);
  if (freed) count_resolved();
}

void LeaseLog::count_resolved() {
  size_t n = 0;
  for (const auto& [num, s] : segments_) n += num != active_ && s.live == 0;
  resolved_.store(n, std::memory_order_release);
}

Result<bool> LeaseLog::lookup(DeliveryId id, std::string& record) const {
  if (live_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(mu_);
  const Loc* at = live_.find(id);
  if (at == nullptr) return false;
  const Loc& loc = *at;
  std::string entry(loc.size, '\0');
  size_t got = 0;
  if (auto r = pread_all(segments_.at(loc.segment).fd, entry.data(), loc.size, loc.offset, got); !r)
    return r.error();
  DeliveryId found = 0;
  std::string_view rec;
  if (parse_entry(entry.data(), got, found, rec) != loc.size || found != id)
    return make_error(Errc::kCorruption, "lease log: bad entry");
  record.assign(rec);
  return true;
}

Result<void> LeaseLog::sync() {
  std::lock_guard syncing(sync_mu_);  // remove() cannot close a descriptor synced below
  std::vector<std::pair<uint64_t, int>> todo;
  bool dir;
  {
    std::lock_guard lock(mu_);
    for (uint64_t n : dirty_) {
      auto it = segments_.find(n);
      if (it != segments_.end()) todo.emplace_back(n, it->second.fd);
    }
    dirty_.clear();
    dir = std::exchange(dir_dirty_, false);
  }
  // A sync that fails leaves what it did not sync dirty (as PayloadLog::sync).
  auto keep_dirty = [&](size_t from) {
    std::lock_guard lock(mu_);
    for (size_t i = from; i < todo.size(); ++i) dirty_.insert(dirty_.begin(), todo[i].first);
    dir_dirty_ = dir_dirty_ || dir;
  };
  for (size_t i = 0; i < todo.size(); ++i) {
    if (::fdatasync(todo[i].second) != 0) {
      const int err = errno;
      keep_dirty(i);
      return io_error("cannot sync the lease log", err);
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

std::vector<uint64_t> LeaseLog::resolved_segments() const {
  std::vector<uint64_t> out;
  if (resolved_.load(std::memory_order_acquire) == 0) return out;
  std::lock_guard lock(mu_);
  for (const auto& [n, s] : segments_) {
    if (n != active_ && s.live == 0) out.push_back(n);
  }
  return out;
}

Result<void> LeaseLog::remove(const std::vector<uint64_t>& segments) {
  if (segments.empty()) return ok();
  std::lock_guard syncing(sync_mu_);
  std::lock_guard lock(mu_);
  for (uint64_t n : segments) {
    auto it = segments_.find(n);
    if (it == segments_.end() || n == active_ || it->second.live != 0) continue;
    if (auto r = files_.remove(n); !r) return r;
    ::close(it->second.fd);
    segments_.erase(it);
    std::erase(dirty_, n);
    dir_dirty_ = true;
  }
  count_resolved();
  return ok();
}

uint64_t LeaseLog::bytes() const {
  std::lock_guard lock(mu_);
  uint64_t total = 0;
  for (const auto& [n, s] : segments_) total += s.size;
  return total;
}

size_t LeaseLog::segment_count() const {
  std::lock_guard lock(mu_);
  return segments_.size() + old_.size();
}

}  // namespace ringcast::storage
