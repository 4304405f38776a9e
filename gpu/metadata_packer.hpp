// Packs a step's host arrays into one pinned staging buffer (uploaded with one copy); each array
// starts at a 16-byte boundary, and its offset addresses the device copy of the same bytes.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "base/result.hpp"
#include "gpu/device_buffer.hpp"

namespace coserve::gpu {

// Appends arrays to the pinned staging buffer at 16-byte boundaries; offsets address the device
// copy of the same buffer.
class metadata_packer {
 public:
  explicit metadata_packer(pinned_buffer& host) : host_(host) {}
  template <class T>
  result<size_t> add(const std::vector<T>& v) {
    const size_t off = (used_ + 15) & ~size_t(15);
    const size_t bytes = v.size() * sizeof(T);
    if (off + bytes > host_.bytes())
      return make_error("resource_exhausted", "gpu: step metadata exceeds its buffer");
    if (bytes) std::memcpy(static_cast<char*>(host_.get()) + off, v.data(), bytes);
    used_ = off + bytes;
    return off;
  }
  size_t used() const noexcept { return used_; }

 private:
  pinned_buffer& host_;
  size_t used_ = 0;
};

}  // namespace coserve::gpu
