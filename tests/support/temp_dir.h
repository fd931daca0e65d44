// A directory under $TMPDIR that a test owns and that is removed with everything in it.
#pragma once

#include <string>

namespace ringcast::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ringcast-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ringcast::test
