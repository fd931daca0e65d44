// PowerCutFs mounted for real: what a power cut keeps and what it drops, for each operation and
// fault switch, through the kernel (syscalls, mmap, a shell writer that is SIGKILLed).
// Skipped without /dev/fuse or root, unless CI=true: then those fail.
#include "tests/support/powercut/powercut_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "tests/support/require.h"

namespace ringcast::test {
namespace {

// Why this machine cannot mount FUSE filesystems; empty if it can.
std::string fuse_unavailable() {
  if (::access("/dev/fuse", R_OK | W_OK) != 0) return "/dev/fuse is missing or not accessible";
  if (::geteuid() != 0) return "mounting needs root";
  return {};
}

std::string make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/ringcast-powercut-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

bool is_mount_point(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + path + " ") != std::string::npos) return true;
  }
  return false;
}

// Whole-file helpers; each returns false (or nullopt) and leaves errno on failure.
bool write_file(const std::string& path, const std::string& bytes, int flags = O_TRUNC) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | flags, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

std::optional<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (n < 0) return std::nullopt;
  return out;
}

// fsync of a file or directory by path; the errno of fsync, 0 on success.
int fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  const int r = ::fsync(fd);
  const int e = r == 0 ? 0 : errno;
  ::close(fd);
  return e;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

class PowerCut : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = fuse_unavailable(); !why.empty()) {
      RINGCAST_SKIP_MISSING() << "FUSE is unavailable: " << why;
    }
    dir_ = make_temp_dir();
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
    std::string error;
    fs_ = PowerCutFs::mount(dir_, &error);
    ASSERT_NE(fs_, nullptr) << error;
  }
  // Runs after a failed assertion too: the mount never outlives the test.
  void TearDown() override {
    fs_.reset();
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }

  std::string p(const std::string& relative) const { return fs_->path(relative); }
  std::string root() const { return fs_->mount_point(); }

  // A file with `bytes` whose content and name are durable.
  void durable_file(const std::string& relative, const std::string& bytes) {
    ASSERT_TRUE(write_file(p(relative), bytes)) << std::strerror(errno);
    ASSERT_EQ(fsync_path(p(relative)), 0);
    const size_t slash = relative.rfind('/');
    ASSERT_EQ(fsync_path(slash == std::string::npos ? root() : p(relative.substr(0, slash))), 0);
  }

  CutReport cut(const CutOptions& options = {}) {
    CutReport report = fs_->cut_power(options);
    EXPECT_TRUE(report.ok()) << report.error;
    EXPECT_FALSE(report.lazy_unmount);
    return report;
  }

  std::string dir_;
  std::unique_ptr<PowerCutFs> fs_;
};

TEST_F(PowerCut, UnsyncedWriteIsGone) {
  durable_file("f", "durable");
  ASSERT_TRUE(write_file(p("f"), "unsynced more", O_APPEND));
  EXPECT_EQ(read_file(p("f")), "durableunsynced more");
  const CutReport report = cut();
  EXPECT_EQ(read_file(p("f")), "durable");
  EXPECT_EQ(report.stats.dropped_bytes, std::string("unsynced more").size());
}

TEST_F(PowerCut, FsyncedWriteToADurableFileIsKept) {
  durable_file("f", "");
  ASSERT_TRUE(write_file(p("f"), "synced"));
  ASSERT_EQ(fsync_path(p("f")), 0);
  cut();
  EXPECT_EQ(read_file(p("f")), "synced");
}

TEST_F(PowerCut, FdatasyncIsDurableToo) {
  durable_file("f", "");
  const int fd = ::open(p("f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "datasync", 8, 0), 8);
  ASSERT_EQ(::fdatasync(fd), 0);
  ::close(fd);
  cut();
  EXPECT_EQ(read_file(p("f")), "datasync");
}

TEST_F(PowerCut, NewFileFsyncedWithoutItsDirectoryIsGone) {
  ASSERT_TRUE(write_file(p("f"), "data"));
  ASSERT_EQ(fsync_path(p("f")), 0);
  cut();
  EXPECT_FALSE(exists(p("f")));
}

TEST_F(PowerCut, NewFileWithDirectorySyncIsKept) {
  ASSERT_TRUE(write_file(p("f"), "data"));
  ASSERT_EQ(fsync_path(p("f")), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  EXPECT_EQ(read_file(p("f")), "data");
}

TEST_F(PowerCut, NameSyncedButContentNotIsAnEmptyFile) {
  ASSERT_TRUE(write_file(p("f"), "data"));
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  EXPECT_EQ(read_file(p("f")), "");
}

TEST_F(PowerCut, RenameIsPendingUntilTheDirectoryIsSynced) {
  durable_file("old", "content");
  ASSERT_EQ(::rename(p("old").c_str(), p("new").c_str()), 0);
  EXPECT_FALSE(exists(p("old")));
  cut();
  EXPECT_EQ(read_file(p("old")), "content");
  EXPECT_FALSE(exists(p("new")));

  ASSERT_EQ(::rename(p("old").c_str(), p("new").c_str()), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  EXPECT_FALSE(exists(p("old")));
  EXPECT_EQ(read_file(p("new")), "content");
}

TEST_F(PowerCut, RenameOverAFileIsTheAtomicReplacePattern) {
  durable_file("current", "v1");
  ASSERT_TRUE(write_file(p("current.tmp"), "v2"));
  ASSERT_EQ(fsync_path(p("current.tmp")), 0);
  ASSERT_EQ(::rename(p("current.tmp").c_str(), p("current").c_str()), 0);
  cut();  // the rename is not durable: v1
  EXPECT_EQ(read_file(p("current")), "v1");
  EXPECT_FALSE(exists(p("current.tmp")));

  ASSERT_TRUE(write_file(p("current.tmp"), "v2"));
  ASSERT_EQ(fsync_path(p("current.tmp")), 0);
  ASSERT_EQ(::rename(p("current.tmp").c_str(), p("current").c_str()), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  EXPECT_EQ(read_file(p("current")), "v2");
  EXPECT_FALSE(exists(p("current.tmp")));
}

TEST_F(PowerCut, RenameNoreplaceAndExchange) {
  durable_file("a", "A");
  durable_file("b", "B");
  EXPECT_EQ(::renameat2(AT_FDCWD, p("a").c_str(), AT_FDCWD, p("b").c_str(), RENAME_NOREPLACE), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(::renameat2(AT_FDCWD, p("a").c_str(), AT_FDCWD, p("c").c_str(), RENAME_EXCHANGE), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(::renameat2(AT_FDCWD, p("a").c_str(), AT_FDCWD, p("b").c_str(), RENAME_EXCHANGE), 0);
  EXPECT_EQ(read_file(p("a")), "B");
  EXPECT_EQ(read_file(p("b")), "A");
  cut();
  EXPECT_EQ(read_file(p("a")), "A");
  ASSERT_EQ(::renameat2(AT_FDCWD, p("a").c_str(), AT_FDCWD, p("b").c_str(), RENAME_EXCHANGE), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  EXPECT_EQ(read_file(p("a")), "B");
  EXPECT_EQ(read_file(p("b")), "A");
}

TEST_F(PowerCut, UnlinkIsPendingUntilTheDirectoryIsSynced) {
  durable_file("f", "content");
  ASSERT_EQ(::unlink(p("f").c_str()), 0);
  cut();
  EXPECT_EQ(read_file(p("f")), "content");
  ASSERT_EQ(::unlink(p("f").c_str()), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  EXPECT_FALSE(exists(p("f")));
}

TEST_F(PowerCut, AnOpenUnlinkedFileKeepsWorkingUntilClosed) {
  durable_file("f", "start");
  const int fd = ::open(p("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink(p("f").c_str()), 0);
  EXPECT_FALSE(exists(p("f")));
  ASSERT_EQ(::pwrite(fd, "-more", 5, 5), 5);
  char buf[16] = {};
  ASSERT_EQ(::pread(fd, buf, sizeof buf, 0), 10);
  EXPECT_EQ(std::string(buf, 10), "start-more");
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  EXPECT_EQ(::fsync(fd), 0);
  ::close(fd);
  cut();  // the unlink was not durable: the file is back, with what the fsync made durable
  EXPECT_EQ(read_file(p("f")), "start-more");
}

TEST_F(PowerCut, TruncateIsPendingUntilFsync) {
  durable_file("f", "hello world");
  ASSERT_EQ(::truncate(p("f").c_str(), 5), 0);
  EXPECT_EQ(read_file(p("f")), "hello");
  cut();
  EXPECT_EQ(read_file(p("f")), "hello world");
  ASSERT_EQ(::truncate(p("f").c_str(), 5), 0);
  ASSERT_EQ(fsync_path(p("f")), 0);
  cut();
  EXPECT_EQ(read_file(p("f")), "hello");
  // O_TRUNC at open is a truncate as well.
  ASSERT_TRUE(write_file(p("f"), "x", O_TRUNC));
  cut();
  EXPECT_EQ(read_file(p("f")), "hello");
}

TEST_F(PowerCut, AppendWritesAtTheEndAcrossDescriptors) {
  durable_file("log", "");
  const int a = ::open(p("log").c_str(), O_WRONLY | O_APPEND);
  const int b = ::open(p("log").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(::write(a, "a1", 2), 2);
  ASSERT_EQ(::write(b, "b1", 2), 2);
  ASSERT_EQ(::write(a, "a2", 2), 2);
  ASSERT_EQ(::fsync(b), 0);  // an fsync syncs the file, whatever descriptor it came through
  ASSERT_EQ(::write(b, "b2", 2), 2);
  ::close(a);
  ::close(b);
  EXPECT_EQ(read_file(p("log")), "a1b1a2b2");
  cut();
  EXPECT_EQ(read_file(p("log")), "a1b1a2");
}

TEST_F(PowerCut, DirectoriesAreDurableWithTheirParent) {
  ASSERT_EQ(::mkdir(p("d").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(p("d/f"), "x"));
  ASSERT_EQ(fsync_path(p("d/f")), 0);
  cut();
  EXPECT_FALSE(exists(p("d")));

  ASSERT_EQ(::mkdir(p("d").c_str(), 0755), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  ASSERT_TRUE(write_file(p("d/f"), "x"));
  ASSERT_EQ(fsync_path(p("d/f")), 0);
  cut();  // d is durable, its entry f is not
  EXPECT_TRUE(exists(p("d")));
  EXPECT_FALSE(exists(p("d/f")));

  ASSERT_EQ(::rmdir(p("d").c_str()), 0);
  cut();
  EXPECT_TRUE(exists(p("d")));
  ASSERT_EQ(::rmdir(p("d").c_str()), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  EXPECT_FALSE(exists(p("d")));
}

// Redis 7 creates appendonlydir and never fsyncs the data dir: strictly, its whole AOF is gone
// after a cut; on ext4 any fsync commits the mkdir with the journal. The journaled mode is that.
TEST_F(PowerCut, JournaledNamespaceCommitsEveryNameWithAnyFsync) {
  fs_.reset();
  PowerCutFs::Options options;
  options.journaled_namespace = true;
  std::string error;
  fs_ = PowerCutFs::mount(dir_, options, &error);
  ASSERT_NE(fs_, nullptr) << error;
  ASSERT_EQ(::mkdir(p("aof").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(p("aof/log"), "acked"));
  ASSERT_TRUE(write_file(p("unsynced"), "x"));
  ASSERT_EQ(fsync_path(p("aof/log")), 0);  // no fsync of any directory
  ASSERT_TRUE(write_file(p("later"), "y"));
  cut();
  EXPECT_EQ(read_file(p("aof/log")), "acked");
  EXPECT_EQ(read_file(p("unsynced")), "");  // its name rode along with the commit, not its data
  EXPECT_FALSE(exists(p("later")));
}

TEST_F(PowerCut, HardLinksAndSymlinksArePendingUntilTheDirectoryIsSynced) {
  durable_file("a", "A");
  ASSERT_EQ(::link(p("a").c_str(), p("b").c_str()), 0);
  ASSERT_EQ(::symlink("a", p("s").c_str()), 0);
  EXPECT_EQ(read_file(p("s")), "A");
  cut();
  EXPECT_FALSE(exists(p("b")));
  EXPECT_FALSE(exists(p("s")));

  ASSERT_EQ(::link(p("a").c_str(), p("b").c_str()), 0);
  ASSERT_EQ(::symlink("a", p("s").c_str()), 0);
  ASSERT_EQ(fsync_path(root()), 0);
  cut();
  struct stat st {};
  ASSERT_EQ(::stat(p("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  char target[16] = {};
  ASSERT_EQ(::readlink(p("s").c_str(), target, sizeof target), 1);
  EXPECT_EQ(std::string(target), "a");
  EXPECT_EQ(read_file(p("b")), "A");
}

TEST_F(PowerCut, ModeChangesAreDurableWithFsync) {
  durable_file("f", "");
  ASSERT_EQ(::chmod(p("f").c_str(), 0600), 0);
  cut();
  struct stat st {};
  ASSERT_EQ(::stat(p("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ASSERT_EQ(::chmod(p("f").c_str(), 0600), 0);
  ASSERT_EQ(fsync_path(p("f")), 0);
  cut();
  ASSERT_EQ(::stat(p("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// Four unsynced 1000-byte writes; the cut keeps the first three and tears the last one at a
// 512-byte boundary inside it: at 3072 or 3584.
TEST_F(PowerCut, TearKeepsAPrefixOfTheLastWriteAtASectorBoundary) {
  std::set<off_t> sizes;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    durable_file("log", "");
    std::string expected;
    const int fd = ::open(p("log").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 4; ++i) {
      const std::string record(1000, static_cast<char>('a' + i));
      ASSERT_EQ(::write(fd, record.data(), record.size()), 1000);
      expected += record;
    }
    ::close(fd);
    CutOptions options;
    options.keep = CutOptions::Keep::kAllButLast;
    options.tear = true;
    options.seed = seed;
    const CutReport report = cut(options);
    EXPECT_EQ(report.stats.torn_writes, 1u);
    const std::optional<std::string> got = read_file(p("log"));
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(got->size() == 3072 || got->size() == 3584) << got->size();
    EXPECT_EQ(*got, expected.substr(0, got->size()));
    sizes.insert(static_cast<off_t>(got->size()));
  }
  EXPECT_EQ(sizes.size(), 2u) << "8 seeds should reach both tear points";
}

TEST_F(PowerCut, RandomPrefixIsAPrefixInWriteOrderAndReproducible) {
  auto run = [&](uint64_t seed) -> size_t {
    durable_file("log", "");
    const int fd = ::open(p("log").c_str(), O_WRONLY);
    EXPECT_GE(fd, 0);
    for (int i = 0; i < 10; ++i) {
      const std::string record(100, static_cast<char>('a' + i));
      EXPECT_EQ(::write(fd, record.data(), record.size()), 100);
    }
    ::close(fd);
    CutOptions options;
    options.keep = CutOptions::Keep::kRandomPrefix;
    options.seed = seed;
    cut(options);
    const std::string got = read_file(p("log")).value_or("?");
    EXPECT_EQ(got.size() % 100, 0u);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 'a' + static_cast<int>(i / 100));
    return got.size() / 100;
  };
  std::set<size_t> kept;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const size_t first = run(seed);
    EXPECT_EQ(run(seed), first) << "seed " << seed;
    kept.insert(first);
  }
  EXPECT_GE(kept.size(), 2u);
}

// Since "fsyncgate" Linux drops the dirty pages whose writeback failed: the failed fsync's
// data is never durable, not even after a later fsync succeeds.
TEST_F(PowerCut, DataOfAFailedFsyncIsLost) {
  durable_file("f", "");
  const int fd = ::open(p("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "AAAA", 4, 0), 4);
  fs_->fail_next_fsync(1, EIO);
  EXPECT_EQ(::fsync(fd), -1);
  EXPECT_EQ(errno, EIO);
  ASSERT_EQ(::pwrite(fd, "BBBB", 4, 4), 4);
  EXPECT_EQ(::fsync(fd), 0);
  ::close(fd);
  EXPECT_EQ(read_file(p("f")), "AAAABBBB");  // the page cache still has it
  cut();
  EXPECT_EQ(read_file(p("f")), std::string("\0\0\0\0BBBB", 8));
  EXPECT_EQ(fs_->counters().failed_syncs, 1u);
}

TEST_F(PowerCut, AFailedFsyncdirMakesNoNameDurable) {
  ASSERT_TRUE(write_file(p("f"), "x"));
  ASSERT_EQ(fsync_path(p("f")), 0);
  fs_->fail_next_fsync(1, EIO);
  EXPECT_EQ(fsync_path(root()), EIO);
  cut();
  EXPECT_FALSE(exists(p("f")));
}

TEST_F(PowerCut, EnospcPastTheBudgetAndRecoveryAfterLiftingIt) {
  fs_->enospc_after(8192);
  struct statvfs sv {};
  ASSERT_EQ(::statvfs(root().c_str(), &sv), 0);
  EXPECT_EQ(uint64_t{sv.f_blocks} * sv.f_frsize, 8192u);
  const int fd = ::open(p("f").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string block(8192, 'x');
  ASSERT_EQ(::write(fd, block.data(), block.size()), 8192);
  EXPECT_EQ(::write(fd, "y", 1), -1);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(::fallocate(fd, 0, 0, 16384), -1);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(::pwrite(fd, "over", 4, 0), 4);  // an overwrite needs no space
  ASSERT_EQ(::statvfs(root().c_str(), &sv), 0);
  EXPECT_EQ(sv.f_bavail, 0u);
  fs_->lift_enospc();
  EXPECT_EQ(::write(fd, "y", 1), 1);
  ASSERT_EQ(::statvfs(root().c_str(), &sv), 0);
  EXPECT_GT(uint64_t{sv.f_bavail} * sv.f_bsize, uint64_t{1} << 30);
  ::close(fd);
  EXPECT_GE(fs_->counters().enospc_errors, 2u);
}

TEST_F(PowerCut, ReadOnlyFailsChangesWithErofs) {
  durable_file("f", "data");
  const int fd = ::open(p("f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  fs_->read_only(true);
  EXPECT_EQ(::write(fd, "x", 1), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::fsync(fd), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::open(p("f").c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::open(p("g").c_str(), O_WRONLY | O_CREAT, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::mkdir(p("d").c_str(), 0755), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::rename(p("f").c_str(), p("g").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::unlink(p("f").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::truncate(p("f").c_str(), 0), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(read_file(p("f")), "data");
  fs_->read_only(false);
  EXPECT_EQ(::write(fd, "x", 1), 1);
  ::close(fd);
  EXPECT_EQ(read_file(p("f")), "xata");
}

TEST_F(PowerCut, MmapReadsTheFileAndMsyncMakesWritesDurable) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::string content(3 * page, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>('a' + i % 26);
  durable_file("m", content);
  const int fd = ::open(p("m").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* map = ::mmap(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  char* bytes = static_cast<char*>(map);
  EXPECT_EQ(std::string(bytes, content.size()), content);
  std::memcpy(bytes + page, "synced", 6);
  ASSERT_EQ(::msync(map, content.size(), MS_SYNC), 0);
  std::memcpy(bytes + 2 * page, "unsynced", 8);
  ASSERT_EQ(::munmap(map, content.size()), 0);
  ::close(fd);
  cut();
  std::string expected = content;
  expected.replace(page, 6, "synced");
  EXPECT_EQ(read_file(p("m")), expected);
}

// O_DIRECT works without direct_io (the kernel sends the write straight to the filesystem);
// it says nothing about durability: no fsync, no data.
TEST_F(PowerCut, ODirectWritesStillNeedFsync) {
  durable_file("d", "");
  const int fd = ::open(p("d").c_str(), O_WRONLY | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* buf = nullptr;
  ASSERT_EQ(::posix_memalign(&buf, 4096, 4096), 0);
  std::memset(buf, 'z', 4096);
  EXPECT_EQ(::pwrite(fd, buf, 4096, 0), 4096) << std::strerror(errno);
  std::free(buf);
  ::close(fd);
  EXPECT_EQ(read_file(p("d")), std::string(4096, 'z'));
  cut();
  EXPECT_EQ(read_file(p("d")), "");
}

TEST_F(PowerCut, FallocateExtendsOrReservesAndRejectsOtherModes) {
  durable_file("f", "abc");
  const int fd = ::open(p("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 65536), 0);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 3);
  ASSERT_EQ(::fallocate(fd, 0, 0, 8192), 0);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 8192);
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 10), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ::close(fd);
  cut();
  ASSERT_EQ(::stat(p("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 3);
}

// Every fsync and fdatasync call reaches the filesystem, even when nothing is dirty.
TEST_F(PowerCut, CountersSeeEverySync) {
  durable_file("f", "");
  const PowerCutCounters before = fs_->counters();
  const int fd = ::open(p("f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "12345", 5), 5);
  ASSERT_EQ(::fsync(fd), 0);
  ASSERT_EQ(::fsync(fd), 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ::close(fd);
  ASSERT_EQ(fsync_path(root()), 0);
  const PowerCutCounters after = fs_->counters();
  EXPECT_EQ(after.fsyncs - before.fsyncs, 3u);
  EXPECT_EQ(after.fsyncdirs - before.fsyncdirs, 1u);
  EXPECT_EQ(after.bytes_synced - before.bytes_synced, 5u);
  EXPECT_EQ(after.writes - before.writes, 1u);
}

// A real writer in a child process: dd conv=fsync, coreutils sync of the directory, python's
// os.fsync; then unsynced appends, SIGKILL, cut.
TEST_F(PowerCut, KilledShellWriterKeepsWhatItSynced) {
  const std::string script =
      "set -e\n"
      "dd if=/dev/zero of='" +
      p("synced") +
      "' bs=4096 count=2 conv=fsync 2>/dev/null\n"
      "sync '" +
      root() +
      "'\n"
      "python3 -c 'import os, sys\n"
      "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)\n"
      "os.write(fd, b\"py-data\"); os.fsync(fd)\n"
      "d = os.open(sys.argv[2], os.O_RDONLY); os.fsync(d)' '" +
      p("py") + "' '" + root() +
      "'\n"
      "printf unsynced > '" +
      p("unsynced") +
      "'\n"
      "printf more >> '" +
      p("synced") +
      "'\n"
      "touch '" +
      p("ready") +
      "'\n"
      "exec sleep 60\n";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!exists(p("ready")) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(exists(p("ready"))) << "the writer did not get to the end";
  EXPECT_EQ(read_file(p("synced")), "" + std::string(8192, '\0') + "more");
  cut();
  EXPECT_EQ(read_file(p("synced")), std::string(8192, '\0'));
  EXPECT_EQ(read_file(p("py")), "py-data");
  EXPECT_FALSE(exists(p("unsynced")));
  EXPECT_FALSE(exists(p("ready")));
}

// Cutting while a descriptor is still open: the old mount is detached, its user gets an error,
// the new mount works.
TEST_F(PowerCut, CutWithAnOpenFileDetachesTheOldMount) {
  durable_file("f", "kept");
  const int fd = ::open(p("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "lost", 4, 0), 4);
  const CutReport report = fs_->cut_power();
  ASSERT_TRUE(report.ok()) << report.error;
  EXPECT_TRUE(report.lazy_unmount);
  char buf[4];
  EXPECT_EQ(::pread(fd, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  ::close(fd);
  EXPECT_EQ(read_file(p("f")), "kept");
}

std::string g_failing_mount;  // EXPECT_FATAL_FAILURE's statement may not use locals

void fail_while_mounted() {
  std::unique_ptr<PowerCutFs> fs = PowerCutFs::mount(g_failing_mount);
  ASSERT_NE(fs, nullptr);
  ASSERT_TRUE(write_file(fs->path("f"), "x"));
  FAIL() << "deliberate failure while mounted";
}

TEST_F(PowerCut, UnmountsWhenATestFails) {
  const std::string dir = make_temp_dir();
  ASSERT_FALSE(dir.empty());
  g_failing_mount = dir;
  EXPECT_FATAL_FAILURE(fail_while_mounted(), "deliberate failure while mounted");
  EXPECT_FALSE(is_mount_point(dir));
  EXPECT_EQ(::rmdir(dir.c_str()), 0) << std::strerror(errno);
  // And the fixture's own mount is up now and goes in TearDown.
  EXPECT_TRUE(is_mount_point(root()));
}

TEST_F(PowerCut, ReaddirListsTheCurrentEntries) {
  ASSERT_EQ(::mkdir(p("d").c_str(), 0755), 0);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(write_file(p("d/file-with-a-longish-name-" + std::to_string(i)), ""));
  }
  DIR* d = ::opendir(p("d").c_str());
  ASSERT_NE(d, nullptr);
  std::set<std::string> names;
  while (dirent* e = ::readdir(d)) names.insert(e->d_name);
  ::closedir(d);
  EXPECT_EQ(names.size(), 302u);  // with . and ..
  EXPECT_EQ(names.count("file-with-a-longish-name-299"), 1u);
}

}  // namespace
}  // namespace ringcast::test
