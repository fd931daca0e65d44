// Provided buffers for multishot receives: a ring of equal buffers the
// kernel picks from (IORING_REGISTER_PBUF_RING), set up by hand since liburing 2.3 has no
// io_uring_setup_buf_ring. Invariant: a buffer id reported in a CQE belongs to the caller until
// recycle(id); every other buffer belongs to the kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/result.h"
#include "net/loop.h"

struct io_uring_buf_ring;

namespace ringcast::net {

class BufferRing {
 public:
  // `count` is a power of two (≤ 32768); the group id comes from the loop. Register on the
  // loop's thread (or before the loop runs).
  static Result<std::unique_ptr<BufferRing>> create(Loop& loop, uint32_t count,
                                                    uint32_t buffer_bytes);
  ~BufferRing();
  BufferRing(const BufferRing&) = delete;
  BufferRing& operator=(const BufferRing&) = delete;

  uint16_t group() const { return group_; }
  uint32_t buffer_bytes() const { return buffer_bytes_; }
  char* data(uint16_t id) { return data_.get() + size_t{id} * buffer_bytes_; }
  void recycle(uint16_t id);  // hands buffer `id` back to the kernel

 private:
  BufferRing(Loop& loop, uint16_t group, uint32_t count, uint32_t bytes);
  Loop& loop_;
  uint16_t group_;
  uint32_t count_;
  uint32_t buffer_bytes_;
  io_uring_buf_ring* ring_ = nullptr;  // mmap'd, page aligned
  size_t ring_bytes_ = 0;
  std::unique_ptr<char[]> data_;
  bool registered_ = false;
};

}  // namespace ringcast::net
