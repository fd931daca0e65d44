#define FUSE_USE_VERSION 35

#include "tests/support/powercut/powercut_fs.h"

#include <fuse_lowlevel.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>

namespace ringcast::test {
namespace {

// How long an unmount waits for the last users of the mount to go (a process just killed may
// still be closing its files) before it detaches the mount lazily.
constexpr auto kUnmountPatience = std::chrono::seconds(2);
constexpr auto kUnmountRetry = std::chrono::milliseconds(20);

// Whether /proc/self/mountinfo lists `path` as a mount point.
bool is_mount_point(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point ...
    size_t at = 0;
    for (int field = 0; field < 4 && at != std::string::npos; ++field) {
      at = line.find(' ', at);
      if (at != std::string::npos) ++at;
    }
    if (at == std::string::npos) continue;
    const size_t end = line.find(' ', at);
    if (line.compare(at, end - at, path) == 0) return true;
  }
  return false;
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

// The FUSE low-level callbacks: each takes the lock, refuses with EIO while the power is off,
// calls the model and replies. Timeouts are 0: the kernel asks again for every lookup and
// attribute, so it never shows a name or size the model no longer has.
struct PowerCutFs::Ops {
  static PowerCutFs& fs(fuse_req_t req) {
    return *static_cast<PowerCutFs*>(fuse_req_userdata(req));
  }

  static void reply_entry(PowerCutFs& fs, fuse_req_t req, const struct stat& st) {
    fuse_entry_param e{};
    e.ino = st.st_ino;
    e.generation = 1;  // inode numbers are never reused
    e.attr = st;
    e.attr_timeout = 0;
    e.entry_timeout = 0;
    // A reply that does not arrive (the request was interrupted) gives no lookup to the kernel.
    if (fuse_reply_entry(req, &e) != 0) fs.model_.forget(st.st_ino, 1);
  }

  static void init(void*, fuse_conn_info* conn) {
    // Writes must reach the model when the program writes, not when the kernel flushes them.
    conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  }

  static void lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    struct stat st {};
    if (int e = f.model_.lookup(parent, name, &st)) return (void)fuse_reply_err(req, e);
    reply_entry(f, req, st);
  }

  static void forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    PowerCutFs& f = fs(req);
    {
      std::lock_guard lock(f.mu_);
      f.model_.forget(ino, nlookup);
    }
    fuse_reply_none(req);
  }

  static void forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
    PowerCutFs& f = fs(req);
    {
      std::lock_guard lock(f.mu_);
      for (size_t i = 0; i < count; ++i) f.model_.forget(forgets[i].ino, forgets[i].nlookup);
    }
    fuse_reply_none(req);
  }

  static void getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    struct stat st {};
    if (int e = f.model_.getattr(ino, &st)) return (void)fuse_reply_err(req, e);
    fuse_reply_attr(req, &st, 0);
  }

  static void setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                      fuse_file_info*) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    SetAttrRequest r;
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    if (to_set & FUSE_SET_ATTR_MODE) r.mode = attr->st_mode & 07777;
    if (to_set & FUSE_SET_ATTR_UID) r.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) r.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) r.size = static_cast<uint64_t>(attr->st_size);
    if (to_set & FUSE_SET_ATTR_ATIME) r.atime = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) r.atime = now;
    if (to_set & FUSE_SET_ATTR_MTIME) r.mtime = attr->st_mtim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) r.mtime = now;
    struct stat st {};
    if (int e = f.model_.setattr(ino, r, &st)) return (void)fuse_reply_err(req, e);
    fuse_reply_attr(req, &st, 0);
  }

  static void readlink(fuse_req_t req, fuse_ino_t ino) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    std::string target;
    if (int e = f.model_.readlink(ino, &target)) return (void)fuse_reply_err(req, e);
    fuse_reply_readlink(req, target.c_str());
  }

  static void mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    const fuse_ctx* ctx = fuse_req_ctx(req);
    struct stat st {};
    if (int e = f.model_.mknod(parent, name, mode, ctx->uid, ctx->gid, &st)) {
      return (void)fuse_reply_err(req, e);
    }
    reply_entry(f, req, st);
  }

  static void mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    const fuse_ctx* ctx = fuse_req_ctx(req);
    struct stat st {};
    if (int e = f.model_.mkdir(parent, name, mode, ctx->uid, ctx->gid, &st)) {
      return (void)fuse_reply_err(req, e);
    }
    reply_entry(f, req, st);
  }

  static void symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    const fuse_ctx* ctx = fuse_req_ctx(req);
    struct stat st {};
    if (int e = f.model_.symlink(target, parent, name, ctx->uid, ctx->gid, &st)) {
      return (void)fuse_reply_err(req, e);
    }
    reply_entry(f, req, st);
  }

  static void link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    struct stat st {};
    if (int e = f.model_.link(ino, new_parent, new_name, &st)) return (void)fuse_reply_err(req, e);
    reply_entry(f, req, st);
  }

  static void unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    fuse_reply_err(req, f.powered_ ? f.model_.unlink(parent, name) : EIO);
  }

  static void rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    fuse_reply_err(req, f.powered_ ? f.model_.rmdir(parent, name) : EIO);
  }

  static void rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
                     const char* new_name, unsigned flags) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    fuse_reply_err(req,
                   f.powered_ ? f.model_.rename(parent, name, new_parent, new_name, flags) : EIO);
  }

  static void open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    if (int e = f.model_.open(ino, fi->flags)) return (void)fuse_reply_err(req, e);
    // Page cache on (mmap works), but dropped at every open: keep_cache and direct_io off.
    fi->keep_cache = 0;
    fi->direct_io = 0;
    if (fuse_reply_open(req, fi) != 0) f.model_.release(ino);
  }

  static void create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                     fuse_file_info* fi) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    const fuse_ctx* ctx = fuse_req_ctx(req);
    struct stat st {};
    if (int e = f.model_.create(parent, name, mode, fi->flags, ctx->uid, ctx->gid, &st)) {
      return (void)fuse_reply_err(req, e);
    }
    fi->keep_cache = 0;
    fi->direct_io = 0;
    fuse_entry_param e{};
    e.ino = st.st_ino;
    e.generation = 1;
    e.attr = st;
    if (fuse_reply_create(req, &e, fi) != 0) {
      f.model_.release(st.st_ino);
      f.model_.forget(st.st_ino, 1);
    }
  }

  static void read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    std::string_view bytes;
    if (int e = f.model_.read(ino, static_cast<uint64_t>(off), size, &bytes)) {
      return (void)fuse_reply_err(req, e);
    }
    fuse_reply_buf(req, bytes.data(), bytes.size());
  }

  static void write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                    fuse_file_info*) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    // The kernel resolves O_APPEND: `off` is already the end of the file (its size is exact, since
    // every change goes through this mount).
    if (int e = f.model_.write(ino, static_cast<uint64_t>(off), std::string_view(buf, size))) {
      return (void)fuse_reply_err(req, e);
    }
    fuse_reply_write(req, size);
  }

  static void flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
    fuse_reply_err(req, 0);  // close() promises nothing about durability
  }

  static void release(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    PowerCutFs& f = fs(req);
    {
      std::lock_guard lock(f.mu_);
      f.model_.release(ino);
    }
    fuse_reply_err(req, 0);
  }

  static void fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    fuse_reply_err(req, f.powered_ ? f.model_.fsync(ino) : EIO);
  }

  static void opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    std::vector<DirEntry> list;
    if (int e = f.model_.list_dir(ino, &list)) return (void)fuse_reply_err(req, e);
    const uint64_t id = f.next_dir_handle_++;
    f.dir_lists_.emplace(id, std::move(list));
    fi->fh = id;
    if (fuse_reply_open(req, fi) != 0) f.dir_lists_.erase(id);
  }

  static void readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    auto it = f.dir_lists_.find(fi->fh);
    if (it == f.dir_lists_.end()) return (void)fuse_reply_err(req, EBADF);
    const std::vector<DirEntry>& list = it->second;
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t i = static_cast<size_t>(off); i < list.size(); ++i) {
      struct stat st {};
      st.st_ino = list[i].ino;
      st.st_mode = list[i].mode;
      const size_t n = fuse_add_direntry(req, buf.data() + used, size - used, list[i].name.c_str(),
                                         &st, static_cast<off_t>(i + 1));
      if (n > size - used) break;
      used += n;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  static void releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    PowerCutFs& f = fs(req);
    {
      std::lock_guard lock(f.mu_);
      f.dir_lists_.erase(fi->fh);
    }
    fuse_reply_err(req, 0);
  }

  static void fsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    fuse_reply_err(req, f.powered_ ? f.model_.fsyncdir(ino) : EIO);
  }

  static void statfs(fuse_req_t req, fuse_ino_t) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    if (!f.powered_) return (void)fuse_reply_err(req, EIO);
    struct statvfs st {};
    f.model_.statfs(f.options_.capacity_bytes, &st);
    fuse_reply_statfs(req, &st);
  }

  static void fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                        fuse_file_info*) {
    PowerCutFs& f = fs(req);
    std::lock_guard lock(f.mu_);
    fuse_reply_err(req, f.powered_ ? f.model_.fallocate(ino, mode, static_cast<uint64_t>(offset),
                                                        static_cast<uint64_t>(length))
                                   : EIO);
  }

  static fuse_lowlevel_ops table() {
    fuse_lowlevel_ops ops{};
    ops.init = init;
    ops.lookup = lookup;
    ops.forget = forget;
    ops.forget_multi = forget_multi;
    ops.getattr = getattr;
    ops.setattr = setattr;
    ops.readlink = readlink;
    ops.mknod = mknod;
    ops.mkdir = mkdir;
    ops.symlink = symlink;
    ops.link = link;
    ops.unlink = unlink;
    ops.rmdir = rmdir;
    ops.rename = rename;
    ops.open = open;
    ops.create = create;
    ops.read = read;
    ops.write = write;
    ops.flush = flush;
    ops.release = release;
    ops.fsync = fsync;
    ops.opendir = opendir;
    ops.readdir = readdir;
    ops.releasedir = releasedir;
    ops.fsyncdir = fsyncdir;
    ops.statfs = statfs;
    ops.fallocate = fallocate;
    return ops;
  }
};

PowerCutFs::PowerCutFs(std::string mount_point, Options options)
    : mount_point_(std::move(mount_point)), options_(options), model_(::getuid(), ::getgid()) {
  model_.set_journaled_namespace(options.journaled_namespace);
}

std::unique_ptr<PowerCutFs> PowerCutFs::mount(std::string mount_point, Options options,
                                              std::string* error) {
  std::string unused;
  std::string& err = error != nullptr ? *error : unused;
  while (mount_point.size() > 1 && mount_point.back() == '/') mount_point.pop_back();
  struct stat st {};
  if (::stat(mount_point.c_str(), &st) != 0 && errno == ENOTCONN) {
    ::umount2(mount_point.c_str(), MNT_DETACH);  // left behind by a test process that died
  }
  if (::stat(mount_point.c_str(), &st) != 0) {
    err = errno_text(("stat " + mount_point).c_str());
    return nullptr;
  }
  if (!S_ISDIR(st.st_mode)) {
    err = mount_point + " is not a directory";
    return nullptr;
  }
  std::unique_ptr<PowerCutFs> fs(new PowerCutFs(std::move(mount_point), options));
  err = fs->start_session();
  if (!err.empty()) return nullptr;
  return fs;
}

PowerCutFs::~PowerCutFs() {
  unmount();
}

std::string PowerCutFs::start_session() {
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  std::string mount_options = "fsname=powercut,subtype=powercut,default_permissions";
  if (options_.allow_other) mount_options += ",allow_other";
  if (fuse_opt_add_arg(&args, "powercut-fs") != 0 || fuse_opt_add_arg(&args, "-o") != 0 ||
      fuse_opt_add_arg(&args, mount_options.c_str()) != 0) {
    fuse_opt_free_args(&args);
    return "fuse_opt_add_arg failed";
  }
  const fuse_lowlevel_ops ops = Ops::table();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, this);
  fuse_opt_free_args(&args);
  if (se == nullptr) return "fuse_session_new failed";
  if (fuse_session_mount(se, mount_point_.c_str()) != 0) {
    fuse_session_destroy(se);
    return "fuse_session_mount failed on " + mount_point_ + " (root and /dev/fuse needed)";
  }
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) {
    std::string e = errno_text("eventfd");
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return e;
  }
  {
    std::lock_guard lock(mu_);
    powered_ = true;
  }
  session_ = se;
  wake_fd_ = wake_fd;
  loop_ = std::thread([this, se, wake_fd] { run_loop(se, wake_fd); });
  // The first access waits for the session's INIT: the mount is usable when stat returns.
  struct stat st {};
  if (::stat(mount_point_.c_str(), &st) != 0 || st.st_ino != kRootIno) {
    std::string e = errno_text(("stat of the new mount " + mount_point_).c_str());
    stop_session();
    return e;
  }
  return {};
}

void PowerCutFs::run_loop(fuse_session* se, int wake_fd) {
  fuse_buf buf{};
  pollfd fds[2] = {{fuse_session_fd(se), POLLIN, 0}, {wake_fd, POLLIN, 0}};
  while (!fuse_session_exited(se)) {
    fds[0].revents = fds[1].revents = 0;
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;
    const int n = fuse_session_receive_buf(se, &buf);  // 0 once the mount is gone (ENODEV)
    if (n == -EINTR || n == -EAGAIN) continue;
    if (n <= 0) break;
    fuse_session_process_buf(se, &buf);
  }
  std::free(buf.mem);
}

bool PowerCutFs::stop_session() {
  if (session_ == nullptr) return true;
  // A clean unmount first: the kernel then ends the connection itself. EBUSY means a user is
  // left (an open file, a cwd); it may be a process that is still exiting, so wait a little.
  bool clean = false;
  const auto give_up = std::chrono::steady_clock::now() + kUnmountPatience;
  for (;;) {
    if (::umount2(mount_point_.c_str(), UMOUNT_NOFOLLOW) == 0) {
      clean = true;
      break;
    }
    if (errno != EBUSY || std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(kUnmountRetry);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof one);
  loop_.join();
  ::close(wake_fd_);
  wake_fd_ = -1;
  // After a clean unmount this only closes /dev/fuse. Otherwise closing it aborts the
  // connection (its users get ENOTCONN) and libfuse detaches the mount (MNT_DETACH as root).
  fuse_session_unmount(session_);
  fuse_session_destroy(session_);
  session_ = nullptr;
  if (!clean && is_mount_point(mount_point_)) ::umount2(mount_point_.c_str(), MNT_DETACH);
  std::lock_guard lock(mu_);
  dir_lists_.clear();
  return clean;
}

bool PowerCutFs::mounted() const {
  return session_ != nullptr;
}

bool PowerCutFs::unmount() {
  std::lock_guard control(control_mu_);
  return stop_session();
}

CutReport PowerCutFs::cut_power(const CutOptions& options) {
  std::lock_guard control(control_mu_);
  CutReport report;
  {
    std::lock_guard lock(mu_);
    powered_ = false;  // from here on nothing becomes durable, nothing changes
  }
  report.lazy_unmount = !stop_session();
  {
    std::lock_guard lock(mu_);
    report.stats = model_.cut(options);
  }
  report.error = start_session();
  return report;
}

void PowerCutFs::fail_next_fsync(int count, int error) {
  std::lock_guard lock(mu_);
  model_.fail_next_syncs(count, error);
}

void PowerCutFs::enospc_after(uint64_t content_bytes_max) {
  std::lock_guard lock(mu_);
  model_.set_content_budget(content_bytes_max);
}

void PowerCutFs::lift_enospc() {
  std::lock_guard lock(mu_);
  model_.set_content_budget(std::nullopt);
}

void PowerCutFs::read_only(bool on) {
  std::lock_guard lock(mu_);
  model_.set_read_only(on);
}

void PowerCutFs::make_durable() {
  std::lock_guard lock(mu_);
  model_.make_durable();
}

PowerCutCounters PowerCutFs::counters() const {
  std::lock_guard lock(mu_);
  return model_.counters();
}

}  // namespace ringcast::test
