// The in-memory filesystem behind PowerCutFs (powercut_fs.h), without FUSE: every inode keeps
// what reads see (current state) and what a power cut keeps (durable state), and cut() throws
// the difference away. Invariants: a regular file's durable content changes only in fsync()
// (and in cut()); a directory's durable entries change only in fsyncdir() (and in cut()); an
// inode lives while a current entry, a durable entry, a kernel lookup or an open file refers to
// it; after cut() current == durable everywhere and no lookups or opens are counted.
// Not thread-safe: PowerCutFs calls it under its mutex. Errors are positive errno values.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::test {

using Ino = uint64_t;
inline constexpr Ino kRootIno = 1;  // FUSE_ROOT_ID

// What a power cut keeps of each regular file's unsynced operations (writes, truncates,
// fallocates since its last successful fsync, in the order they were issued). Directory entries
// are all-or-nothing: a directory's entries after a cut are those of its last fsyncdir.
struct CutOptions {
  enum class Keep {
    kNothing,       // none: every file is as of its last fsync
    kRandomPrefix,  // per file, the first k of its n operations, k uniform in [0, n] (seeded)
    kAllButLast,    // per file, all operations but the last one
  };
  Keep keep = Keep::kNothing;
  // Tear: the first operation that is not kept, if it is a write, is kept in part: the bytes up
  // to a boundary at a multiple of tear_granularity_bytes (absolute file offset) strictly inside
  // the write, chosen uniformly among those boundaries (seeded). A write that crosses no such
  // boundary is dropped whole (a sector is written atomically). With keep = kAllButLast this is
  // the classic torn tail: everything before the last write reached the disk, the last one
  // only its first sectors. With kNothing it is the first unsynced write that is torn.
  bool tear = false;
  uint32_t tear_granularity_bytes = 512;
  uint64_t seed = 1;  // same seed, same operations: same outcome
};

// What one cut did (cumulative in PowerCutCounters).
struct CutStats {
  uint64_t dropped_bytes = 0;  // bytes of unsynced writes that did not survive (torn parts too)
  uint64_t dropped_ops = 0;    // unsynced operations that did not survive, whole or in part
  uint64_t torn_writes = 0;    // writes kept in part
  uint64_t freed_inodes = 0;   // inodes that no durable entry reaches any more
};

struct PowerCutCounters {
  uint64_t writes = 0;
  uint64_t bytes_written = 0;
  uint64_t fsyncs = 0;        // successful fsync/fdatasync of files (and fsync of a dir inode)
  uint64_t fsyncdirs = 0;     // successful fsyncdir
  uint64_t failed_syncs = 0;  // failed by fail_next_fsync (or EROFS)
  uint64_t bytes_synced = 0;  // bytes of writes made durable by fsync
  uint64_t cuts = 0;
  uint64_t dropped_bytes =
      0;  // sum of CutStats::dropped_bytes (and of bytes lost by failed fsyncs)
  uint64_t torn_writes = 0;
  uint64_t enospc_errors = 0;
  uint64_t erofs_errors = 0;
};

struct SetAttrRequest {
  std::optional<mode_t> mode;  // permission bits only (07777)
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::optional<uint64_t> size;
  std::optional<timespec> atime;  // UTIME_NOW already resolved by the caller
  std::optional<timespec> mtime;
};

struct DirEntry {
  std::string name;
  Ino ino = 0;
  mode_t mode = 0;  // type bits are what readdir needs
};

class FsModel {
 public:
  FsModel(uid_t root_uid, gid_t root_gid);
  ~FsModel();
  FsModel(const FsModel&) = delete;
  FsModel& operator=(const FsModel&) = delete;

  // Namespace. lookup, create, mknod, mkdir, symlink and link count one kernel lookup of the
  // inode they answer with (forget() gives it back).
  int lookup(Ino parent, std::string_view name, struct stat* out);
  void forget(Ino ino, uint64_t lookups);
  int getattr(Ino ino, struct stat* out) const;
  int setattr(Ino ino, const SetAttrRequest& request, struct stat* out);
  int mknod(Ino parent, std::string_view name, mode_t mode, uid_t uid, gid_t gid, struct stat* out);
  int mkdir(Ino parent, std::string_view name, mode_t mode, uid_t uid, gid_t gid, struct stat* out);
  int symlink(std::string_view target, Ino parent, std::string_view name, uid_t uid, gid_t gid,
              struct stat* out);
  int link(Ino ino, Ino new_parent, std::string_view new_name, struct stat* out);
  int unlink(Ino parent, std::string_view name);
  int rmdir(Ino parent, std::string_view name);
  int rename(Ino parent, std::string_view name, Ino new_parent, std::string_view new_name,
             unsigned flags);  // 0, RENAME_NOREPLACE or RENAME_EXCHANGE
  int readlink(Ino ino, std::string* out) const;
  int list_dir(Ino ino, std::vector<DirEntry>* out) const;  // with "." and ".."

  // Files. open/create count an open file until release(); O_TRUNC truncates.
  int open(Ino ino, int flags);
  int create(Ino parent, std::string_view name, mode_t mode, int flags, uid_t uid, gid_t gid,
             struct stat* out);
  void release(Ino ino);
  // The bytes stay valid until the next call that changes the model.
  int read(Ino ino, uint64_t offset, uint64_t size, std::string_view* out) const;
  int write(Ino ino, uint64_t offset, std::string_view bytes);
  int fallocate(Ino ino, int mode, uint64_t offset, uint64_t length);

  // Durability.
  int fsync(Ino ino);     // a file: content, size and mode; a directory: as fsyncdir
  int fsyncdir(Ino ino);  // the directory's entries and mode
  void make_durable();    // as if everything had been synced ("sync" of the whole tree)
  CutStats cut(const CutOptions& options);

  // Faults.
  void fail_next_syncs(int count, int error);  // count 0 clears
  void set_content_budget(std::optional<uint64_t> bytes);
  void set_read_only(bool on) { read_only_ = on; }
  // Journaled namespace: every successful fsync or fsyncdir makes every directory's current
  // entries durable, as the one journal commit of ext4 or xfs carries every earlier create,
  // rename and unlink. Off (the default): only fsyncdir of the directory itself does (POSIX).
  void set_journaled_namespace(bool on) { journaled_namespace_ = on; }

  void statfs(uint64_t default_capacity_bytes, struct statvfs* out) const;
  const PowerCutCounters& counters() const { return counters_; }
  uint64_t content_bytes() const { return content_bytes_; }
  size_t inode_count() const { return nodes_.size(); }

 private:
  struct Node;
  Node* find(Ino ino) const;
  int dir_of(Ino ino, Node** out) const;
  int check_writable();
  int check_growth(uint64_t growth);
  int add_node(Ino parent, std::string_view name, mode_t mode, uid_t uid, gid_t gid,
               std::string data, struct stat* out);
  bool inside(Ino dir, Ino ancestor) const;
  void sync_entries(Node& dir, std::vector<Ino>* unreferenced);
  void commit_namespace();
  void maybe_free(Ino ino);
  void fill(const Node& n, struct stat* out) const;

  std::map<Ino, std::unique_ptr<Node>> nodes_;  // ordered: cut() walks inodes in a fixed order
  Ino next_ino_ = kRootIno + 1;
  uint64_t content_bytes_ = 0;  // sum of current content sizes (what the budget limits)
  std::optional<uint64_t> budget_bytes_;
  bool read_only_ = false;
  bool journaled_namespace_ = false;
  int fail_syncs_ = 0;
  int fail_errno_ = 0;
  PowerCutCounters counters_;
};

}  // namespace ringcast::test
