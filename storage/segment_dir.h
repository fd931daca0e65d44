// A directory of numbered segment files ("%016x" + suffix), the on-disk shape shared by the
// payload log and the lease log: created on first use, listed at open, one file per segment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace ringcast::storage {

class SegmentDir {
 public:
  // The error messages of one log (static strings, as Error keeps them).
  struct Messages {
    const char* dir;     // the directory cannot be created, opened, listed or synced
    const char* create;  // a segment cannot be created
    const char* remove;  // a segment cannot be removed
  };

  // Creates `dir` if missing, opens it and lists the segments in it (ascending) into `found`.
  static Result<SegmentDir> open(const std::string& dir, const char* suffix, const Messages& m,
                                 std::vector<uint64_t>& found);
  SegmentDir() = default;
  SegmentDir(SegmentDir&& o) noexcept;
  SegmentDir& operator=(SegmentDir&& o) noexcept;
  SegmentDir(const SegmentDir&) = delete;
  SegmentDir& operator=(const SegmentDir&) = delete;
  ~SegmentDir();

  std::string path_of(uint64_t segment) const;
  // A new, empty segment opened for reading and writing (never an existing one).
  Result<int> create(uint64_t segment) const;
  // Removes a segment's file (one already gone is fine).
  Result<void> remove(uint64_t segment) const;
  // fsync of the directory (after segments were created or removed).
  Result<void> sync() const;

 private:
  std::string dir_;
  const char* suffix_ = "";
  Messages m_{};
  int fd_ = -1;
};

}  // namespace ringcast::storage
