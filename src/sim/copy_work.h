// Copies and memsets as work on a stream, shared by the flat forms (copies.cpp: cuMemcpy*, cuMemset*)
// and the strided ones (strided_copies.cpp: 2D, 3D, peer and batched copies, pitched memsets). Every
// copy is rows of `width` bytes: one row for the flat forms, Height rows of Depth slices for the
// strided ones, each side with its own pitch. Each row is checked where the call is made and again
// when the work executes (the memory may have gone while it waited in its stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "driver/driver_api.h"

namespace uvmpool::sim {

struct WorkSpec;  // timeline.h

// Where one side of a copy may lie: device memory only, or host memory as well (unified addressing:
// a pointer outside the device address space is host memory).
enum class Side { Device, HostOrDevice };

// How a copy or memset is submitted: on a stream (the Async forms), or on the default stream with the
// host waiting for it. `per_thread` for the _ptds and _ptsz forms. With `into`, it is made for a graph
// node (graphs.cpp): checked as a call would be, in the current context, then appended there, not run.
struct Submission {
  const CUstream* stream;  // nullptr: synchronous
  bool per_thread;
  std::vector<WorkSpec>* into = nullptr;
};

// One side of a copy: row r of slice z starts at base + z * slice + r * pitch.
struct Rows {
  std::uintptr_t base = 0;
  Side side = Side::HostOrDevice;
  std::size_t pitch = 0;
  std::size_t slice = 0;
};

// A copy's extent: `depth` slices of `height` rows of `width` bytes.
struct Extent {
  std::size_t width = 0;
  std::size_t height = 1;
  std::size_t depth = 1;
};

// Copies `extent` from `src` to `dst` as one piece of work on `how`'s stream. A synchronous copy, or
// one with a side in pageable host memory, returns once it ran (and keeps other threads' driver
// calls out while it waits, as the real driver's lock does). CUDA_ERROR_INVALID_VALUE when a row
// lies outside what its side allows, or the extent overflows the address space.
CUresult copy_rows(Rows dst, Rows src, Extent extent, Submission how, const char* call);

// Sets `height` rows of `width` elements of `size` bytes (1, 2 or 4) to `value`, rows `pitch` bytes
// apart from `dst` (device memory), as one piece of work. The address and the pitch must be
// multiples of `size`.
CUresult fill_rows(CUdeviceptr dst, std::size_t pitch, std::uint32_t value, std::size_t size, std::size_t width,
                   std::size_t height, Submission how, const char* call);

// A 3D copy (strided_copies.cpp: cuMemcpy3D and its forms, and graphs' memcpy nodes).
CUresult copy_3d(const CUDA_MEMCPY3D* c, Submission how, const char* call);

}  // namespace uvmpool::sim
