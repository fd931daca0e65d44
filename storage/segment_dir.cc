#include "storage/segment_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "storage/status.h"

namespace ringcast::storage {
namespace {

// "%016" PRIx64 + suffix → number; false for other names.
bool parse_segment_name(std::string_view n, std::string_view suffix, uint64_t& out) {
  if (n.size() != 16 + suffix.size() || n.substr(16) != suffix) return false;
  uint64_t v = 0;
  for (char c : n.substr(0, 16)) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  out = v;
  return true;
}

}  // namespace

Result<SegmentDir> SegmentDir::open(const std::string& dir, const char* suffix, const Messages& m,
                                    std::vector<uint64_t>& found) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return io_error(m.dir, errno);
  SegmentDir d;
  d.dir_ = dir;
  d.suffix_ = suffix;
  d.m_ = m;
  d.fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd_ < 0) return io_error(m.dir, errno);
  const int list_fd = ::dup(d.fd_);
  DIR* listing = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
  if (listing == nullptr) {
    if (list_fd >= 0) ::close(list_fd);
    return io_error(m.dir, errno);
  }
  found.clear();
  while (dirent* e = ::readdir(listing)) {
    uint64_t n = 0;
    if (parse_segment_name(e->d_name, suffix, n)) found.push_back(n);
  }
  ::closedir(listing);
  std::sort(found.begin(), found.end());
  return d;
}

SegmentDir::SegmentDir(SegmentDir&& o) noexcept
    : dir_(std::move(o.dir_)), suffix_(o.suffix_), m_(o.m_), fd_(std::exchange(o.fd_, -1)) {}

SegmentDir& SegmentDir::operator=(SegmentDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(o.dir_);
    suffix_ = o.suffix_;
    m_ = o.m_;
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

SegmentDir::~SegmentDir() {
  if (fd_ >= 0) ::close(fd_);
}

std::string SegmentDir::path_of(uint64_t segment) const {
  char name[17];
  std::snprintf(name, sizeof name, "%016" PRIx64, segment);
  return dir_ + "/" + name + suffix_;
}

Result<int> SegmentDir::create(uint64_t segment) const {
  const int fd = ::open(path_of(segment).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return io_error(m_.create, errno);
  return fd;
}

Result<void> SegmentDir::remove(uint64_t segment) const {
  if (::unlink(path_of(segment).c_str()) != 0 && errno != ENOENT) return io_error(m_.remove, errno);
  return ok();
}

Result<void> SegmentDir::sync() const {
  if (::fsync(fd_) != 0) return io_error(m_.dir, errno);
  return ok();
}

}  // namespace ringcast::storage
