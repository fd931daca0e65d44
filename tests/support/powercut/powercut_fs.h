// A FUSE filesystem for durability tests that can lose power (after Jepsen's LazyFS): writes
// stay in its memory until their file is fsync'ed, creates/renames/unlinks until their parent
// directory is fsync'ed, and cut_power() drops everything else and mounts it again, as if the
// machine had lost power. Tests put a data dir (RocksDB, the payload and lease logs, Redis'
// AOF/RDB) on it, SIGKILL the writer, cut, restart, and check that nothing acknowledged was lost
// (SPEC R12.2: a delivery is persisted before its first byte is sent; R13.4: order holds across
// crashes). docs/powercut-fs.md says what it models and what it does not.
// Invariants: what a cut keeps is what fs_model.h's FsModel holds as durable; after a cut the
// kernel holds nothing of the old mount (a new mount, no cached pages, dentries or attributes).
// Needs root (or CAP_SYS_ADMIN) and /dev/fuse. One session thread serves the mount; control
// calls may come from any thread (one mutex).
#pragma once

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/powercut/fs_model.h"

struct fuse_session;

namespace ringcast::test {

// What cut_power() did.
struct CutReport {
  std::string error;          // empty: the filesystem is mounted again at the same path
  bool lazy_unmount = false;  // something still held the old mount: it was detached (MNT_DETACH)
                              // and its connection aborted (ENOTCONN for whoever still uses it)
  CutStats stats;
  bool ok() const { return error.empty(); }
};

class PowerCutFs {
 public:
  struct Options {
    // What statfs reports while no enospc_after() budget is set.
    uint64_t capacity_bytes = uint64_t{64} << 30;
    bool allow_other = false;  // let other users than the mounting one in (child processes
                               // that drop privileges)
    // Strict (false, the default): a name is durable once its directory is fsync'ed (POSIX; what
    // a portable program must do). Journaled (true): any successful fsync or fsyncdir makes every
    // earlier create, rename, unlink, mkdir... durable, as ext4's and xfs' single journal commit
    // does in practice. File data is per file in both. FsModel::set_journaled_namespace.
    bool journaled_namespace = false;
  };

  // Mounts an empty filesystem on `mount_point` (an existing directory; a stale FUSE mount left
  // there by a crashed test process is detached first). Null and `*error` on failure.
  static std::unique_ptr<PowerCutFs> mount(std::string mount_point, Options options,
                                           std::string* error = nullptr);
  static std::unique_ptr<PowerCutFs> mount(std::string mount_point, std::string* error = nullptr) {
    return mount(std::move(mount_point), Options{}, error);
  }
  ~PowerCutFs();  // unmount()
  PowerCutFs(const PowerCutFs&) = delete;
  PowerCutFs& operator=(const PowerCutFs&) = delete;

  const std::string& mount_point() const { return mount_point_; }
  std::string path(const std::string& relative) const { return mount_point_ + "/" + relative; }
  bool mounted() const;

  // Loses power: every operation from now on fails with EIO until the new mount is up; the
  // mount is taken down, everything not durable is dropped (CutOptions says how much of the
  // unsynced file data survives), and the filesystem is mounted again at the same path.
  // Kill (and reap) every process that uses the filesystem first: an open file or a cwd in it
  // makes the unmount lazy (CutReport::lazy_unmount) and that process sees ENOTCONN. The fault
  // switches below stay as they are.
  CutReport cut_power(const CutOptions& options = {});

  // Faults. The next `count` fsync/fdatasync/fsyncdir calls fail with `error`; a failed fsync of
  // a file makes its unsynced data lost for good (reads still see it, no later fsync makes it
  // durable, a cut drops it), as Linux does since "fsyncgate". A failed fsyncdir makes nothing
  // durable. count 0 clears.
  void fail_next_fsync(int count = 1, int error = EIO);
  // A budget for the sum of all files' current sizes: a write, truncate or fallocate that would
  // grow the sum past it fails with ENOSPC (whole; no short writes); statfs reports it as the
  // capacity. lift_enospc() removes it.
  void enospc_after(uint64_t content_bytes_max);
  void lift_enospc();
  // While on, writes, truncates, fallocate, opens for writing, namespace changes, fsync and
  // fsyncdir fail with EROFS (like ext4 after errors=remount-ro); reads work.
  void read_only(bool on);

  // Makes everything durable, as if every file and directory had been synced (test setup).
  void make_durable();
  PowerCutCounters counters() const;

  // Takes the mount down (lazily if something still uses it). Idempotent. True if the unmount
  // was clean; false if it had to be lazy or failed.
  bool unmount();

 private:
  struct Ops;  // the FUSE callbacks (powercut_fs.cc)
  PowerCutFs(std::string mount_point, Options options);
  std::string start_session();  // empty or an error
  bool stop_session();          // under no lock; true: clean unmount
  void run_loop(fuse_session* session, int wake_fd);

  const std::string mount_point_;
  const Options options_;
  mutable std::mutex mu_;
  FsModel model_;        // guarded by mu_
  bool powered_ = true;  // guarded by mu_: false, every op fails EIO
  // Guarded by mu_: what each open directory handle lists (taken at opendir), by handle id.
  std::map<uint64_t, std::vector<DirEntry>> dir_lists_;
  uint64_t next_dir_handle_ = 1;
  fuse_session* session_ = nullptr;  // touched by control calls only
  std::thread loop_;
  int wake_fd_ = -1;       // eventfd: ends run_loop
  std::mutex control_mu_;  // one control call (cut, unmount) at a time
};

}  // namespace ringcast::test
