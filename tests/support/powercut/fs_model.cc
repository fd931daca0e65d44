#include "tests/support/powercut/fs_model.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE (_GNU_SOURCE)

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <random>
#include <set>

namespace ringcast::test {
namespace {

constexpr size_t kNameBytesMax = 255;
constexpr uint64_t kBlockBytes = 4096;
constexpr uint64_t kInodesMax = 1u << 20;

timespec now() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

bool is_dir(mode_t m) {
  return S_ISDIR(m);
}

// One operation on a regular file since its last fsync, replayable on the durable content.
struct PendingOp {
  enum class Kind { kWrite, kResize, kAllocate };
  Kind kind = Kind::kWrite;
  uint64_t offset = 0;  // kWrite, kAllocate
  uint64_t length = 0;  // kResize: the new size; kAllocate: the length; kWrite: bytes.size()
  std::string bytes;    // kWrite
  bool lost = false;    // its fsync failed: it never becomes durable (Linux after fsyncgate)
};

// Applies `op` to `content`, of a write only its first `write_bytes_max` bytes.
void apply(std::string& content, const PendingOp& op, uint64_t write_bytes_max) {
  switch (op.kind) {
    case PendingOp::Kind::kWrite: {
      const uint64_t n = std::min<uint64_t>(op.bytes.size(), write_bytes_max);
      if (n == 0) return;
      if (content.size() < op.offset + n) content.resize(op.offset + n, '\0');
      std::memcpy(content.data() + op.offset, op.bytes.data(), n);
      return;
    }
    case PendingOp::Kind::kResize:
      content.resize(op.length, '\0');
      return;
    case PendingOp::Kind::kAllocate:
      if (content.size() < op.offset + op.length) content.resize(op.offset + op.length, '\0');
      return;
  }
}

}  // namespace

struct FsModel::Node {
  Ino ino = 0;
  mode_t mode = 0;  // type | permissions, current
  mode_t durable_mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  timespec atime{}, mtime{}, ctime{};
  uint32_t nlink = 0;         // current entries naming it (directories: 2 + subdirectories)
  uint64_t lookups = 0;       // kernel references (FUSE nlookup)
  uint32_t opens = 0;         // open file handles
  uint32_t durable_refs = 0;  // durable entries naming it
  std::string data;           // regular file: content; symlink: target
  std::string durable_data;   // regular file: content as of the last fsync
  std::vector<PendingOp> pending;
  std::map<std::string, Ino, std::less<>> entries;          // directory, current
  std::map<std::string, Ino, std::less<>> durable_entries;  // directory, as of the last fsyncdir
  Ino parent = kRootIno;                                    // directory
};

FsModel::FsModel(uid_t root_uid, gid_t root_gid) {
  auto root = std::make_unique<Node>();
  root->ino = kRootIno;
  root->mode = root->durable_mode = S_IFDIR | 0755;
  root->uid = root_uid;
  root->gid = root_gid;
  root->atime = root->mtime = root->ctime = now();
  root->nlink = 2;
  root->parent = kRootIno;
  nodes_.emplace(kRootIno, std::move(root));
}

FsModel::~FsModel() = default;

FsModel::Node* FsModel::find(Ino ino) const {
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? nullptr : it->second.get();
}

int FsModel::dir_of(Ino ino, Node** out) const {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  if (!is_dir(n->mode)) return ENOTDIR;
  *out = n;
  return 0;
}

int FsModel::check_writable() {
  if (!read_only_) return 0;
  ++counters_.erofs_errors;
  return EROFS;
}

int FsModel::check_growth(uint64_t growth) {
  if (!budget_bytes_ || growth == 0 || content_bytes_ + growth <= *budget_bytes_) return 0;
  ++counters_.enospc_errors;
  return ENOSPC;
}

void FsModel::fill(const Node& n, struct stat* out) const {
  *out = {};
  out->st_ino = n.ino;
  out->st_mode = n.mode;
  out->st_nlink = n.nlink;
  out->st_uid = n.uid;
  out->st_gid = n.gid;
  out->st_size = static_cast<off_t>(n.data.size());
  out->st_blksize = kBlockBytes;
  out->st_blocks = static_cast<blkcnt_t>((n.data.size() + 511) / 512);
  out->st_atim = n.atime;
  out->st_mtim = n.mtime;
  out->st_ctim = n.ctime;
}

int FsModel::lookup(Ino parent, std::string_view name, struct stat* out) {
  Node* p = nullptr;
  if (int e = dir_of(parent, &p)) return e;
  if (name.size() > kNameBytesMax) return ENAMETOOLONG;
  auto it = p->entries.find(name);
  if (it == p->entries.end()) return ENOENT;
  Node* n = find(it->second);
  assert(n != nullptr);
  ++n->lookups;
  fill(*n, out);
  return 0;
}

void FsModel::forget(Ino ino, uint64_t lookups) {
  Node* n = find(ino);
  if (n == nullptr) return;
  n->lookups -= std::min(n->lookups, lookups);
  maybe_free(ino);
}

int FsModel::getattr(Ino ino, struct stat* out) const {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  fill(*n, out);
  return 0;
}

int FsModel::setattr(Ino ino, const SetAttrRequest& r, struct stat* out) {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  if (int e = check_writable()) return e;
  const timespec t = now();
  if (r.size) {
    if (is_dir(n->mode)) return EISDIR;
    if (!S_ISREG(n->mode)) return EINVAL;
    const uint64_t size = n->data.size();
    if (*r.size > size) {
      if (int e = check_growth(*r.size - size)) return e;
    }
    if (*r.size != size || !n->pending.empty()) {
      PendingOp op;
      op.kind = PendingOp::Kind::kResize;
      op.length = *r.size;
      n->pending.push_back(std::move(op));
    }
    content_bytes_ = content_bytes_ - size + *r.size;
    n->data.resize(*r.size, '\0');
    n->mtime = t;
  }
  if (r.mode) n->mode = (n->mode & S_IFMT) | (*r.mode & 07777);
  if (r.uid) n->uid = *r.uid;
  if (r.gid) n->gid = *r.gid;
  if (r.atime) n->atime = *r.atime;
  if (r.mtime) n->mtime = *r.mtime;
  n->ctime = t;
  fill(*n, out);
  return 0;
}

int FsModel::add_node(Ino parent, std::string_view name, mode_t mode, uid_t uid, gid_t gid,
                      std::string data, struct stat* out) {
  Node* p = nullptr;
  if (int e = dir_of(parent, &p)) return e;
  if (int e = check_writable()) return e;
  if (name.size() > kNameBytesMax) return ENAMETOOLONG;
  if (p->entries.count(name) != 0) return EEXIST;
  if (nodes_.size() >= kInodesMax) return ENOSPC;
  auto n = std::make_unique<Node>();
  n->ino = next_ino_++;
  n->mode = n->durable_mode = mode;
  n->uid = uid;
  n->gid = gid;
  n->atime = n->mtime = n->ctime = now();
  // A new inode's initial state is durable with its first durable entry (a journaling
  // filesystem writes the inode with the entry): a symlink's target, a file's emptiness.
  n->durable_data = data;
  n->data = std::move(data);
  if (is_dir(mode)) {
    n->nlink = 2;
    n->parent = parent;
    ++p->nlink;
  } else {
    n->nlink = 1;
  }
  n->lookups = 1;
  p->entries.emplace(std::string(name), n->ino);
  p->mtime = p->ctime = n->ctime;
  fill(*n, out);
  nodes_.emplace(n->ino, std::move(n));
  return 0;
}

int FsModel::mknod(Ino parent, std::string_view name, mode_t mode, uid_t uid, gid_t gid,
                   struct stat* out) {
  if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode)) return EPERM;
  return add_node(parent, name, mode, uid, gid, {}, out);
}

int FsModel::mkdir(Ino parent, std::string_view name, mode_t mode, uid_t uid, gid_t gid,
                   struct stat* out) {
  return add_node(parent, name, S_IFDIR | (mode & 07777), uid, gid, {}, out);
}

int FsModel::symlink(std::string_view target, Ino parent, std::string_view name, uid_t uid,
                     gid_t gid, struct stat* out) {
  return add_node(parent, name, S_IFLNK | 0777, uid, gid, std::string(target), out);
}

int FsModel::link(Ino ino, Ino new_parent, std::string_view new_name, struct stat* out) {
  Node* n = find(ino);
  Node* p = nullptr;
  if (n == nullptr) return ENOENT;
  if (int e = dir_of(new_parent, &p)) return e;
  if (int e = check_writable()) return e;
  if (is_dir(n->mode)) return EPERM;
  if (new_name.size() > kNameBytesMax) return ENAMETOOLONG;
  if (p->entries.count(new_name) != 0) return EEXIST;
  p->entries.emplace(std::string(new_name), ino);
  ++n->nlink;
  ++n->lookups;
  n->ctime = p->mtime = p->ctime = now();
  fill(*n, out);
  return 0;
}

int FsModel::unlink(Ino parent, std::string_view name) {
  Node* p = nullptr;
  if (int e = dir_of(parent, &p)) return e;
  if (int e = check_writable()) return e;
  auto it = p->entries.find(name);
  if (it == p->entries.end()) return ENOENT;
  Node* n = find(it->second);
  if (is_dir(n->mode)) return EISDIR;
  const Ino ino = it->second;
  p->entries.erase(it);
  --n->nlink;
  n->ctime = p->mtime = p->ctime = now();
  maybe_free(ino);
  return 0;
}

int FsModel::rmdir(Ino parent, std::string_view name) {
  Node* p = nullptr;
  if (int e = dir_of(parent, &p)) return e;
  if (int e = check_writable()) return e;
  if (name == "." || name == "..") return EINVAL;
  auto it = p->entries.find(name);
  if (it == p->entries.end()) return ENOENT;
  Node* n = find(it->second);
  if (!is_dir(n->mode)) return ENOTDIR;
  if (!n->entries.empty()) return ENOTEMPTY;
  const Ino ino = it->second;
  p->entries.erase(it);
  --p->nlink;
  n->nlink = 0;
  n->ctime = p->mtime = p->ctime = now();
  maybe_free(ino);
  return 0;
}

bool FsModel::inside(Ino dir, Ino ancestor) const {
  for (Ino at = dir;; at = find(at)->parent) {
    if (at == ancestor) return true;
    if (at == kRootIno) return false;
  }
}

int FsModel::rename(Ino parent, std::string_view name, Ino new_parent, std::string_view new_name,
                    unsigned flags) {
  if ((flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) != 0) return EINVAL;
  if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) return EINVAL;
  Node* p = nullptr;
  Node* np = nullptr;
  if (int e = dir_of(parent, &p)) return e;
  if (int e = dir_of(new_parent, &np)) return e;
  if (int e = check_writable()) return e;
  if (new_name.size() > kNameBytesMax) return ENAMETOOLONG;
  auto src_it = p->entries.find(name);
  if (src_it == p->entries.end()) return ENOENT;
  const Ino src = src_it->second;
  Node* s = find(src);
  auto dst_it = np->entries.find(new_name);
  const Ino dst = dst_it == np->entries.end() ? 0 : dst_it->second;
  Node* d = dst == 0 ? nullptr : find(dst);
  const timespec t = now();
  // A directory must not move into its own subtree (the VFS checks this too).
  if (is_dir(s->mode) && inside(new_parent, src)) return EINVAL;
  if (flags & RENAME_EXCHANGE) {
    if (d == nullptr) return ENOENT;
    if (is_dir(d->mode) && inside(parent, dst)) return EINVAL;
    src_it->second = dst;
    dst_it->second = src;
    if (parent != new_parent) {
      if (is_dir(s->mode)) --p->nlink, ++np->nlink, s->parent = new_parent;
      if (is_dir(d->mode)) --np->nlink, ++p->nlink, d->parent = parent;
    }
    s->ctime = d->ctime = p->mtime = p->ctime = np->mtime = np->ctime = t;
    return 0;
  }
  if (d != nullptr) {
    if (flags & RENAME_NOREPLACE) return EEXIST;
    if (dst == src) return 0;
    if (is_dir(s->mode) && !is_dir(d->mode)) return ENOTDIR;
    if (!is_dir(s->mode) && is_dir(d->mode)) return EISDIR;
    if (is_dir(d->mode) && !d->entries.empty()) return ENOTEMPTY;
  }
  if (d != nullptr) {
    np->entries.erase(dst_it);
    if (is_dir(d->mode)) {
      d->nlink = 0;
      --np->nlink;
    } else {
      --d->nlink;
    }
    d->ctime = t;
  }
  p->entries.erase(src_it);
  np->entries.emplace(std::string(new_name), src);
  if (is_dir(s->mode) && parent != new_parent) {
    --p->nlink;
    ++np->nlink;
    s->parent = new_parent;
  }
  s->ctime = p->mtime = p->ctime = np->mtime = np->ctime = t;
  if (dst != 0) maybe_free(dst);
  return 0;
}

int FsModel::readlink(Ino ino, std::string* out) const {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  if (!S_ISLNK(n->mode)) return EINVAL;
  *out = n->data;
  return 0;
}

int FsModel::list_dir(Ino ino, std::vector<DirEntry>* out) const {
  Node* n = nullptr;
  if (int e = dir_of(ino, &n)) return e;
  out->clear();
  out->push_back({".", ino, S_IFDIR});
  out->push_back({"..", n->parent, S_IFDIR});
  for (const auto& [name, child] : n->entries) {
    out->push_back({name, child, find(child)->mode});
  }
  return 0;
}

int FsModel::open(Ino ino, int flags) {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  const bool writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0;
  if (is_dir(n->mode) && writes) return EISDIR;
  if (writes) {
    if (int e = check_writable()) return e;
  }
  if ((flags & O_TRUNC) && S_ISREG(n->mode) && (n->data.size() != 0 || !n->pending.empty())) {
    PendingOp op;
    op.kind = PendingOp::Kind::kResize;
    op.length = 0;
    n->pending.push_back(std::move(op));
    content_bytes_ -= n->data.size();
    n->data.clear();
    n->mtime = n->ctime = now();
  }
  ++n->opens;
  return 0;
}

int FsModel::create(Ino parent, std::string_view name, mode_t mode, int flags, uid_t uid, gid_t gid,
                    struct stat* out) {
  Node* p = nullptr;
  if (int e = dir_of(parent, &p)) return e;
  auto it = p->entries.find(name);
  if (it != p->entries.end()) {  // it appeared after the kernel's lookup
    if (flags & O_EXCL) return EEXIST;
    if (int e = open(it->second, flags)) return e;
    Node* n = find(it->second);
    ++n->lookups;
    fill(*n, out);
    return 0;
  }
  if (int e = add_node(parent, name, S_IFREG | (mode & 07777), uid, gid, {}, out)) return e;
  ++find(out->st_ino)->opens;
  return 0;
}

void FsModel::release(Ino ino) {
  Node* n = find(ino);
  if (n == nullptr || n->opens == 0) return;
  --n->opens;
  maybe_free(ino);
}

int FsModel::read(Ino ino, uint64_t offset, uint64_t size, std::string_view* out) const {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  if (is_dir(n->mode)) return EISDIR;
  if (offset >= n->data.size()) {
    *out = {};
    return 0;
  }
  *out = std::string_view(n->data).substr(offset, size);
  return 0;
}

int FsModel::write(Ino ino, uint64_t offset, std::string_view bytes) {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  if (!S_ISREG(n->mode)) return EBADF;
  if (int e = check_writable()) return e;
  const uint64_t end = offset + bytes.size();
  const uint64_t size = n->data.size();
  if (int e = check_growth(end > size ? end - size : 0)) return e;
  if (end > size) {
    n->data.resize(end, '\0');
    content_bytes_ += end - size;
  }
  std::memcpy(n->data.data() + offset, bytes.data(), bytes.size());
  PendingOp op;
  op.kind = PendingOp::Kind::kWrite;
  op.offset = offset;
  op.length = bytes.size();
  op.bytes = std::string(bytes);
  n->pending.push_back(std::move(op));
  n->mtime = n->ctime = now();
  ++counters_.writes;
  counters_.bytes_written += bytes.size();
  return 0;
}

int FsModel::fallocate(Ino ino, int mode, uint64_t offset, uint64_t length) {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  if (!S_ISREG(n->mode)) return ENODEV;
  if ((mode & ~FALLOC_FL_KEEP_SIZE) != 0) return EOPNOTSUPP;
  if (int e = check_writable()) return e;
  const uint64_t end = offset + length;
  const uint64_t size = n->data.size();
  // KEEP_SIZE reserves blocks past the end; the model has no blocks, it only checks the budget.
  if (int e = check_growth(end > size ? end - size : 0)) return e;
  if ((mode & FALLOC_FL_KEEP_SIZE) == 0 && end > size) {
    n->data.resize(end, '\0');
    content_bytes_ += end - size;
    PendingOp op;
    op.kind = PendingOp::Kind::kAllocate;
    op.offset = offset;
    op.length = length;
    n->pending.push_back(std::move(op));
    n->mtime = n->ctime = now();
  }
  return 0;
}

int FsModel::fsync(Ino ino) {
  Node* n = find(ino);
  if (n == nullptr) return ENOENT;
  if (is_dir(n->mode)) return fsyncdir(ino);
  if (fail_syncs_ > 0) {
    --fail_syncs_;
    ++counters_.failed_syncs;
    // Linux marks the pages clean after a failed writeback: reads still see them, no later
    // fsync writes them, a cut loses them.
    for (PendingOp& op : n->pending) op.lost = true;
    return fail_errno_;
  }
  if (read_only_) {
    ++counters_.failed_syncs;
    ++counters_.erofs_errors;
    return EROFS;
  }
  for (const PendingOp& op : n->pending) {
    if (op.lost) {
      if (op.kind == PendingOp::Kind::kWrite) counters_.dropped_bytes += op.bytes.size();
      continue;
    }
    apply(n->durable_data, op, UINT64_MAX);
    if (op.kind == PendingOp::Kind::kWrite) counters_.bytes_synced += op.bytes.size();
  }
  n->pending.clear();
  n->durable_mode = n->mode;
  ++counters_.fsyncs;
  if (journaled_namespace_) commit_namespace();
  return 0;
}

int FsModel::fsyncdir(Ino ino) {
  Node* n = nullptr;
  if (int e = dir_of(ino, &n)) return e;
  // A failed fsyncdir makes nothing durable; unlike file data, the entries are not lost: a later
  // fsyncdir that succeeds makes them durable (journaled metadata is retried).
  if (fail_syncs_ > 0) {
    --fail_syncs_;
    ++counters_.failed_syncs;
    return fail_errno_;
  }
  if (read_only_) {
    ++counters_.failed_syncs;
    ++counters_.erofs_errors;
    return EROFS;
  }
  if (journaled_namespace_) {
    commit_namespace();
  } else {
    std::vector<Ino> unreferenced;
    sync_entries(*n, &unreferenced);
    for (Ino i : unreferenced) maybe_free(i);
  }
  n->durable_mode = n->mode;
  ++counters_.fsyncdirs;
  return 0;
}

void FsModel::sync_entries(Node& dir, std::vector<Ino>* unreferenced) {
  for (const auto& [name, child] : dir.entries) ++find(child)->durable_refs;
  for (const auto& [name, child] : dir.durable_entries) {
    if (--find(child)->durable_refs == 0) unreferenced->push_back(child);
  }
  dir.durable_entries = dir.entries;
}

void FsModel::commit_namespace() {
  std::vector<Ino> unreferenced;
  for (auto& [ino, n] : nodes_) {
    if (is_dir(n->mode)) sync_entries(*n, &unreferenced);
  }
  for (Ino i : unreferenced) maybe_free(i);
}

void FsModel::make_durable() {
  for (auto& [ino, n] : nodes_) {
    if (S_ISREG(n->mode)) {
      n->durable_data = n->data;
      n->pending.clear();
    }
    n->durable_mode = n->mode;
    n->durable_refs = 0;
  }
  for (auto& [ino, n] : nodes_) {
    if (!is_dir(n->mode)) continue;
    n->durable_entries = n->entries;
    for (const auto& [name, child] : n->entries) ++find(child)->durable_refs;
  }
  std::vector<Ino> all;
  for (const auto& [ino, n] : nodes_) all.push_back(ino);
  for (Ino i : all) maybe_free(i);
}

void FsModel::maybe_free(Ino first) {
  std::vector<Ino> work{first};
  while (!work.empty()) {
    const Ino ino = work.back();
    work.pop_back();
    Node* n = find(ino);
    if (n == nullptr || ino == kRootIno || n->nlink != 0 || n->lookups != 0 || n->opens != 0 ||
        n->durable_refs != 0) {
      continue;
    }
    for (const auto& [name, child] : n->durable_entries) {
      if (--find(child)->durable_refs == 0) work.push_back(child);
    }
    if (S_ISREG(n->mode)) content_bytes_ -= n->data.size();
    nodes_.erase(ino);
  }
}

CutStats FsModel::cut(const CutOptions& options) {
  CutStats stats;
  std::mt19937_64 rng(options.seed);
  const uint64_t granule = std::max<uint32_t>(options.tear_granularity_bytes, 1);
  for (auto& [ino, n] : nodes_) {
    if (S_ISREG(n->mode)) {
      std::vector<const PendingOp*> live;
      for (const PendingOp& op : n->pending) {
        if (!op.lost) {
          live.push_back(&op);
        } else {
          ++stats.dropped_ops;
          if (op.kind == PendingOp::Kind::kWrite) stats.dropped_bytes += op.bytes.size();
        }
      }
      const size_t count = live.size();
      size_t kept = 0;
      switch (options.keep) {
        case CutOptions::Keep::kNothing:
          break;
        case CutOptions::Keep::kRandomPrefix:
          kept = count == 0 ? 0 : static_cast<size_t>(rng() % (count + 1));
          break;
        case CutOptions::Keep::kAllButLast:
          kept = count == 0 ? 0 : count - 1;
          break;
      }
      for (size_t i = 0; i < kept; ++i) apply(n->durable_data, *live[i], UINT64_MAX);
      for (size_t i = kept; i < count; ++i) {
        const PendingOp& op = *live[i];
        ++stats.dropped_ops;
        uint64_t torn = 0;  // bytes of this write that survive
        if (i == kept && options.tear && op.kind == PendingOp::Kind::kWrite) {
          const uint64_t first = (op.offset / granule + 1) * granule;
          const uint64_t end = op.offset + op.bytes.size();
          if (first < end) {
            const uint64_t boundaries = (end - 1 - first) / granule + 1;
            torn = first + (rng() % boundaries) * granule - op.offset;
            apply(n->durable_data, op, torn);
            ++stats.torn_writes;
          }
        }
        if (op.kind == PendingOp::Kind::kWrite) stats.dropped_bytes += op.bytes.size() - torn;
      }
      n->data = n->durable_data;
      n->pending.clear();
    }
    n->mode = n->durable_mode;
    n->entries = n->durable_entries;
    n->nlink = 0;
    n->lookups = 0;
    n->opens = 0;
    n->durable_refs = 0;
  }

  // What the durable entries reach from the root survives. A directory that durable entries
  // name twice (moved between two directories of which only one was synced) keeps its first
  // name in breadth-first order (names sorted): the kernel cannot handle directory hard links.
  std::set<Ino> reached{kRootIno};
  std::deque<Ino> queue{kRootIno};
  Node* root = find(kRootIno);
  root->nlink = 2;
  root->parent = kRootIno;
  while (!queue.empty()) {
    Node* d = find(queue.front());
    queue.pop_front();
    for (auto it = d->entries.begin(); it != d->entries.end();) {
      Node* c = find(it->second);
      if (is_dir(c->mode)) {
        if (!reached.insert(c->ino).second) {
          it = d->entries.erase(it);
          continue;
        }
        c->nlink = 2;
        c->parent = d->ino;
        ++d->nlink;
        queue.push_back(c->ino);
      } else {
        reached.insert(c->ino);
        ++c->nlink;
      }
      ++c->durable_refs;
      ++it;
    }
    d->durable_entries = d->entries;
  }
  content_bytes_ = 0;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (reached.count(it->first) == 0) {
      ++stats.freed_inodes;
      it = nodes_.erase(it);
      continue;
    }
    if (S_ISREG(it->second->mode)) content_bytes_ += it->second->data.size();
    ++it;
  }
  ++counters_.cuts;
  counters_.dropped_bytes += stats.dropped_bytes;
  counters_.torn_writes += stats.torn_writes;
  return stats;
}

void FsModel::fail_next_syncs(int count, int error) {
  fail_syncs_ = std::max(count, 0);
  fail_errno_ = error;
}

void FsModel::set_content_budget(std::optional<uint64_t> bytes) {
  budget_bytes_ = bytes;
}

void FsModel::statfs(uint64_t default_capacity_bytes, struct statvfs* out) const {
  *out = {};
  const uint64_t capacity = budget_bytes_ ? *budget_bytes_ : default_capacity_bytes;
  const uint64_t free_bytes = capacity > content_bytes_ ? capacity - content_bytes_ : 0;
  // Both block sizes alike: programs compute free space as f_bavail * f_bsize (RocksDB's
  // GetFreeSpace does) as often as with f_frsize.
  out->f_bsize = kBlockBytes;
  out->f_frsize = kBlockBytes;
  out->f_blocks = capacity / kBlockBytes;
  out->f_bfree = free_bytes / kBlockBytes;
  out->f_bavail = free_bytes / kBlockBytes;
  out->f_files = kInodesMax;
  out->f_ffree = kInodesMax - std::min<uint64_t>(nodes_.size(), kInodesMax);
  out->f_favail = out->f_ffree;
  out->f_namemax = kNameBytesMax;
}

}  // namespace ringcast::test
