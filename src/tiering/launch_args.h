// Reading a launch's argument bytes for the pointers in them.
//
// cuLaunchKernel and its kin take the arguments in one of two forms, never both:
//   - kernelParams: one pointer per parameter, to that parameter's bytes; how many there are and how
//     big each is comes from the function's ParamLayout;
//   - extra: CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE, the packed buffer itself.
// A pointer in the argument buffer is 8-byte aligned wherever it lies: a parameter of its own, or a
// field of a by-value struct (PyTorch's elementwise kernels pass `Array<char*, N>`), since a struct
// holding a pointer is itself 8-aligned. So every 8-aligned word of the buffer is a candidate, and
// the caller looks each up in the pool's address map; words that are not pointers (sizes, strides,
// floats) almost never fall inside pool address space, and when one does, the cost is one needless
// touch, never a wrong result: addresses never change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "driver/driver_api.h"
#include "tiering/param_layouts.h"

namespace uvmpool::tiering {

// The largest argument buffer a launch can pass (CUDA 12.1 and later).
inline constexpr std::size_t kMaxArgumentBytes = 32764;

// Calls visit(word) for each 8-aligned 8-byte word of the arguments. False when they cannot be read:
// the kernelParams form with an unknown layout, or an `extra` list of something other than a buffer
// and its size.
template <typename Visit>
bool for_each_word(const ParamLayout& layout, void** params, void** extra, Visit&& visit) {
  if (params != nullptr) {
    if (!layout.known) return false;
    for (std::size_t i = 0; i < layout.params.size(); ++i) {
      const auto [offset, size] = layout.params[i];
      const auto* bytes = static_cast<const unsigned char*>(params[i]);
      if (bytes == nullptr || size < 8) continue;
      // Words aligned in the buffer, read through the parameter's own pointer.
      for (std::size_t at = (offset + 7) & ~std::size_t{7}; at + 8 <= std::size_t{offset} + size; at += 8) {
        std::uint64_t word;
        std::memcpy(&word, bytes + (at - offset), sizeof word);
        visit(word);
      }
    }
    return true;
  }
  if (extra == nullptr) return true;  // no arguments
  const unsigned char* buffer = nullptr;
  std::size_t size = 0;
  // The list ends with CU_LAUNCH_PARAM_END; nothing else may be in it. A few entries at most.
  for (int i = 0; i < 8 && extra[2 * i] != CU_LAUNCH_PARAM_END; ++i) {
    if (extra[2 * i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = static_cast<const unsigned char*>(extra[2 * i + 1]);
    } else if (extra[2 * i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (extra[2 * i + 1] == nullptr) return false;
      size = *static_cast<const std::size_t*>(extra[2 * i + 1]);
    } else {
      return false;
    }
  }
  if (buffer == nullptr) return false;
  // The buffer is 8-aligned where the driver copies it to; the program's copy may not be, so words
  // are counted from its start.
  const std::size_t end = size < kMaxArgumentBytes ? size : kMaxArgumentBytes;
  for (std::size_t at = 0; at + 8 <= end; at += 8) {
    std::uint64_t word;
    std::memcpy(&word, buffer + at, sizeof word);
    visit(word);
  }
  return true;
}

}  // namespace uvmpool::tiering
