#include "net/buffer_ring.h"

#include <liburing.h>
#include <sys/mman.h>

#include <cerrno>

namespace ringcast::net {

BufferRing::BufferRing(Loop& loop, uint16_t group, uint32_t count, uint32_t bytes)
    : loop_(loop), group_(group), count_(count), buffer_bytes_(bytes) {}

Result<std::unique_ptr<BufferRing>> BufferRing::create(Loop& loop, uint32_t count,
                                                       uint32_t buffer_bytes) {
  if (count == 0 || count > 32768 || (count & (count - 1)) != 0 || buffer_bytes == 0) {
    return make_error(Errc::kInvalidArgument, "buffer ring: count must be a power of two");
  }
  std::unique_ptr<BufferRing> r(
      new BufferRing(loop, loop.alloc_buffer_group(), count, buffer_bytes));
  r->ring_bytes_ = sizeof(io_uring_buf) * count;
  void* mem =
      ::mmap(nullptr, r->ring_bytes_, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (mem == MAP_FAILED) {
    Error e = make_error(Errc::kIo, "buffer ring: mmap failed");
    e.sys_errno = errno;
    return e;
  }
  r->ring_ = static_cast<io_uring_buf_ring*>(mem);
  r->data_ = std::make_unique<char[]>(size_t{count} * buffer_bytes);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(mem);
  reg.ring_entries = count;
  reg.bgid = r->group_;
  const int rc = io_uring_register_buf_ring(loop.ring(), &reg, 0);
  if (rc != 0) {
    Error e = make_error(Errc::kIo, "buffer ring: register failed");
    e.sys_errno = -rc;
    return e;
  }
  r->registered_ = true;
  io_uring_buf_ring_init(r->ring_);
  const int mask = io_uring_buf_ring_mask(count);
  for (uint32_t i = 0; i < count; ++i) {
    io_uring_buf_ring_add(r->ring_, r->data(static_cast<uint16_t>(i)), buffer_bytes,
                          static_cast<uint16_t>(i), mask, static_cast<int>(i));
  }
  io_uring_buf_ring_advance(r->ring_, static_cast<int>(count));
  return r;
}

BufferRing::~BufferRing() {
  if (registered_) io_uring_unregister_buf_ring(loop_.ring(), group_);
  if (ring_) ::munmap(ring_, ring_bytes_);
}

void BufferRing::recycle(uint16_t id) {
  io_uring_buf_ring_add(ring_, data(id), buffer_bytes_, id, io_uring_buf_ring_mask(count_), 0);
  io_uring_buf_ring_advance(ring_, 1);
}

}  // namespace ringcast::net
