// FsModel without FUSE: the parts of a cut that the kernel cannot easily produce on purpose.
#include "tests/support/powercut/fs_model.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace ringcast::test {
namespace {

struct Fixture {
  FsModel fs{0, 0};
  Ino mkdir(Ino parent, const char* name) {
    struct stat st {};
    EXPECT_EQ(fs.mkdir(parent, name, 0755, 0, 0, &st), 0);
    return st.st_ino;
  }
  Ino create(Ino parent, const char* name) {
    struct stat st {};
    EXPECT_EQ(fs.create(parent, name, 0644, 0, 0, 0, &st), 0);
    fs.release(st.st_ino);
    return st.st_ino;
  }
  int lookup(Ino parent, const char* name, Ino* ino = nullptr) {
    struct stat st {};
    const int e = fs.lookup(parent, name, &st);
    if (e == 0) {
      fs.forget(st.st_ino, 1);
      if (ino != nullptr) *ino = st.st_ino;
    }
    return e;
  }
  std::string content(Ino ino) {
    std::string_view v;
    EXPECT_EQ(fs.read(ino, 0, 1 << 20, &v), 0);
    return std::string(v);
  }
};

// A directory moved between two directories of which only the target was synced is named by
// two durable entries; the cut keeps one name (the first in breadth-first, sorted order).
TEST(FsModel, ADirectoryNamedTwiceAfterACutKeepsOneName) {
  Fixture f;
  const Ino a = f.mkdir(kRootIno, "a");
  const Ino b = f.mkdir(kRootIno, "b");
  const Ino d = f.mkdir(a, "d");
  f.fs.forget(a, 1);
  f.fs.forget(b, 1);
  f.fs.forget(d, 1);
  f.fs.make_durable();
  ASSERT_EQ(f.fs.rename(a, "d", b, "d", 0), 0);
  ASSERT_EQ(f.fs.fsyncdir(b), 0);
  f.fs.cut({});
  Ino found = 0;
  EXPECT_EQ(f.lookup(a, "d", &found), 0);
  EXPECT_EQ(found, d);
  EXPECT_EQ(f.lookup(b, "d"), ENOENT);
  struct stat st {};
  ASSERT_EQ(f.fs.getattr(kRootIno, &st), 0);
  EXPECT_EQ(st.st_nlink, 4u);  // ".", "..", a/.., b/..
  ASSERT_EQ(f.fs.getattr(a, &st), 0);
  EXPECT_EQ(st.st_nlink, 3u);
  ASSERT_EQ(f.fs.getattr(b, &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
}

// A file moved between two directories of which only the target was synced has two names.
TEST(FsModel, AFileMovedBetweenDirectoriesWithOnlyTheTargetSyncedHasTwoNames) {
  Fixture f;
  const Ino a = f.mkdir(kRootIno, "a");
  const Ino b = f.mkdir(kRootIno, "b");
  const Ino x = f.create(a, "x");
  f.fs.make_durable();
  ASSERT_EQ(f.fs.rename(a, "x", b, "x", 0), 0);
  ASSERT_EQ(f.fs.fsyncdir(b), 0);
  f.fs.cut({});
  Ino in_a = 0, in_b = 0;
  ASSERT_EQ(f.lookup(a, "x", &in_a), 0);
  ASSERT_EQ(f.lookup(b, "x", &in_b), 0);
  EXPECT_EQ(in_a, x);
  EXPECT_EQ(in_b, x);
  struct stat st {};
  ASSERT_EQ(f.fs.getattr(x, &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
}

// Tear granularity 1: the torn length is anywhere inside the write.
TEST(FsModel, TearWithByteGranularityCutsInsideASector) {
  Fixture f;
  const Ino x = f.create(kRootIno, "x");
  f.fs.make_durable();
  ASSERT_EQ(f.fs.write(x, 0, std::string(100, 'r')), 0);
  CutOptions options;
  options.tear = true;
  options.tear_granularity_bytes = 1;
  options.seed = 3;
  const CutStats stats = f.fs.cut(options);
  EXPECT_EQ(stats.torn_writes, 1u);
  const std::string got = f.content(x);
  EXPECT_GT(got.size(), 0u);
  EXPECT_LT(got.size(), 100u);
  EXPECT_EQ(stats.dropped_bytes, 100u - got.size());
  // A write inside one 512-byte sector is not torn with the default granularity: dropped whole.
  ASSERT_EQ(f.fs.write(x, 0, std::string(100, 's')), 0);
  options.tear_granularity_bytes = 512;
  EXPECT_EQ(f.fs.cut(options).torn_writes, 0u);
  EXPECT_EQ(f.content(x), got);
}

// Unreachable inodes are freed at the cut, and unlinked, unreferenced ones at once.
TEST(FsModel, FreesWhatNothingReferences) {
  Fixture f;
  const Ino x = f.create(kRootIno, "x");
  ASSERT_EQ(f.fs.write(x, 0, "data"), 0);
  EXPECT_EQ(f.fs.content_bytes(), 4u);
  f.fs.forget(x, 1);
  ASSERT_EQ(f.fs.unlink(kRootIno, "x"), 0);
  EXPECT_EQ(f.fs.inode_count(), 1u);
  EXPECT_EQ(f.fs.content_bytes(), 0u);
  f.create(kRootIno, "y");
  EXPECT_EQ(f.fs.cut({}).freed_inodes, 1u);
  EXPECT_EQ(f.fs.inode_count(), 1u);
}

}  // namespace
}  // namespace ringcast::test
