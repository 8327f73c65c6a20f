// Copies and memsets are work on a stream (timeline.h): they execute at submission unless their stream
// waits for something, take virtual time by the bytes they move per path, and the synchronous forms
// wait for them on the default stream. The device side must lie in mapped memory accessible from the
// device, otherwise the call returns CUDA_ERROR_INVALID_VALUE instead of faulting; a range may span
// adjacent mappings, as VMM allows. A pointer outside the device address space is host memory (UVA):
// allowed where the API takes host memory (cuMemcpy's unified pointers, the host side of HtoD/DtoH),
// refused as a device pointer.
#include <cstring>
#include <mutex>
#include <string>

#include "sim/address_space.h"
#include "sim/arrays.h"
#include "sim/contexts.h"
#include "sim/copy_work.h"
#include "sim/device_memory.h"
#include "sim/entry_points.h"
#include "sim/streams_events.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {

// Caller holds the address space's lock (shared).
CUresult check_range(AddressSpace& space, std::uintptr_t p, std::size_t n, bool write, Side side) {
  if (p == 0 || p + n < p) return CUDA_ERROR_INVALID_VALUE;
  if (space.overlaps_arena(p, n)) return space.accessible(p, n, write) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return side == Side::Device ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult work_context(Submission how) {
  Context* context = nullptr;
  return how.stream != nullptr ? timeline::stream_context(*how.stream, how.per_thread, &context)
                               : current_context(&context);
}

// With `how.into`: appended there for a graph node, not run. `waits`: the call returns only once the work ended (the synchronous forms, and copies with a
// pageable side, which the real driver makes synchronous); a copy that waits so keeps other threads'
// calls out meanwhile, as the driver's lock does (timeline::submit_and_wait).
CUresult run(Submission how, WorkSpec work, bool waits, bool keeps_others_out) {
  if (how.into != nullptr) {
    how.into->push_back(std::move(work));
    return CUDA_SUCCESS;
  }
  if (how.stream != nullptr && !waits) return timeline::submit(*how.stream, how.per_thread, std::move(work));
  return timeline::submit_and_wait(how.stream != nullptr ? *how.stream : nullptr, how.per_thread, std::move(work),
                                   keeps_others_out);
}

// Row r of slice z of one side; whether the last byte of the whole extent stays in the address space.
std::uintptr_t row_at(const Rows& rows, std::size_t r, std::size_t z) { return rows.base + z * rows.slice + r * rows.pitch; }
bool fits(const Rows& rows, const Extent& e) {
  std::size_t down = 0, across = 0, span = 0, end = 0;
  return !__builtin_mul_overflow(e.depth - 1, rows.slice, &down) &&
         !__builtin_mul_overflow(e.height - 1, rows.pitch, &across) && !__builtin_add_overflow(down, across, &span) &&
         !__builtin_add_overflow(span, e.width, &span) && !__builtin_add_overflow(rows.base, span, &end);
}

// Every row of both sides, as the side allows. Caller holds the address space's lock (shared).
CUresult check_rows(AddressSpace& space, const Rows& dst, const Rows& src, const Extent& e) {
  for (std::size_t z = 0; z < e.depth; ++z)
    for (std::size_t r = 0; r < e.height; ++r) {
      if (CUresult s = check_range(space, row_at(dst, r, z), e.width, true, dst.side); s != CUDA_SUCCESS) return s;
      if (CUresult s = check_range(space, row_at(src, r, z), e.width, false, src.side); s != CUDA_SUCCESS) return s;
    }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult copy_rows(Rows dst, Rows src, Extent extent, Submission how, const char* call) {
  if (CUresult status = work_context(how); status != CUDA_SUCCESS) return status;
  if (extent.width == 0 || extent.height == 0 || extent.depth == 0) return CUDA_SUCCESS;
  if (!fits(dst, extent) || !fits(src, extent)) return CUDA_ERROR_INVALID_VALUE;
  bool pageable = false;
  {
    AddressSpace& space = AddressSpace::get();
    std::shared_lock lock(space.mutex);
    if (CUresult status = check_rows(space, dst, src, extent); status != CUDA_SUCCESS) return status;
    pageable = pageable_side(space, dst.base, src.base);
  }
  WorkSpec work;
  work.kind = WorkKind::Copy;
  work.what = call;
  // Checked again when it executes: the memory may have gone while it waited in its stream.
  work.effect = [=](int, Touches& touches) {
    AddressSpace& space = AddressSpace::get();
    if (check_rows(space, dst, src, extent) != CUDA_SUCCESS) return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (std::size_t z = 0; z < extent.depth; ++z)
      for (std::size_t r = 0; r < extent.height; ++r) {
        const std::uintptr_t to = row_at(dst, r, z), from = row_at(src, r, z);
        classify_copy(space, to, from, extent.width, touches);
        std::memmove(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), extent.width);
      }
    return CUDA_SUCCESS;
  };
  return run(how, std::move(work), how.stream == nullptr || pageable, true);
}

CUresult fill_rows(CUdeviceptr dst, std::size_t pitch, std::uint32_t value, std::size_t size, std::size_t width,
                   std::size_t height, Submission how, const char* call) {
  if (CUresult status = work_context(how); status != CUDA_SUCCESS) return status;
  if (dst % size != 0 || (height > 1 && pitch % size != 0)) return CUDA_ERROR_INVALID_VALUE;  // element alignment
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  std::size_t row_bytes = 0;
  if (__builtin_mul_overflow(width, size, &row_bytes) || (height > 1 && pitch < row_bytes))
    return CUDA_ERROR_INVALID_VALUE;
  const Rows rows{dst, Side::Device, pitch, 0};
  const Extent extent{row_bytes, height, 1};
  if (!fits(rows, extent)) return CUDA_ERROR_INVALID_VALUE;
  {
    AddressSpace& space = AddressSpace::get();
    std::shared_lock lock(space.mutex);
    for (std::size_t r = 0; r < height; ++r)
      if (CUresult s = check_range(space, row_at(rows, r, 0), row_bytes, true, Side::Device); s != CUDA_SUCCESS)
        return s;
  }
  WorkSpec work;
  work.kind = WorkKind::Memset;
  work.what = call;
  work.effect = [=](int device, Touches& touches) {
    AddressSpace& space = AddressSpace::get();
    for (std::size_t r = 0; r < height; ++r)
      if (check_range(space, row_at(rows, r, 0), row_bytes, true, Side::Device) != CUDA_SUCCESS)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    // A memset is device work: the bytes count per tier, whichever device's memory they are.
    DeviceMemory memory(space, device, touches);
    for (std::size_t r = 0; r < height; ++r) {
      const std::uintptr_t at = row_at(rows, r, 0);
      auto* out = static_cast<unsigned char*>(memory.write<unsigned char>(at, row_bytes));
      if (out == nullptr) {
        // Memory the device cannot reach (another device's cuMemAlloc): as the copy engine would, write
        // it anyway, counted as device bytes.
        touches.device_write += row_bytes;
        touches.add_range(at, at + row_bytes);
        out = reinterpret_cast<unsigned char*>(at);
      }
      if (size == 1) {
        std::memset(out, static_cast<int>(value), row_bytes);
      } else {
        for (std::size_t i = 0; i < width; ++i) std::memcpy(out + i * size, &value, size);  // little-endian
      }
    }
    return CUDA_SUCCESS;
  };
  return run(how, std::move(work), how.stream == nullptr, false);
}

namespace {

CUresult copy(std::uintptr_t dst, Side dst_side, std::uintptr_t src, Side src_side, std::size_t n, Submission how,
              const char* call) {
  return copy_rows({dst, dst_side}, {src, src_side}, {n}, how, call);
}

template <typename T>
CUresult fill(CUdeviceptr dst, T value, std::size_t count, Submission how, const char* call) {
  return fill_rows(dst, 0, value, sizeof(T), count, 1, how, call);
}

std::uintptr_t host(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

constexpr Side kDev = Side::Device;
constexpr Side kAny = Side::HostOrDevice;
constexpr Submission kSync{nullptr, false};
constexpr Submission kSyncPerThread{nullptr, true};
Submission on(const CUstream& s) { return {&s, false}; }
Submission on_per_thread(const CUstream& s) { return {&s, true}; }

}  // namespace

CUresult impl::cuMemcpy(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kAny, src, kAny, n, kSync, "cuMemcpy");
}
CUresult impl::cuMemcpy_ptds(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kAny, src, kAny, n, kSyncPerThread, "cuMemcpy_ptds");
}
CUresult impl::cuMemcpyHtoD_v2(CUdeviceptr_v2 dst, const void* src, size_t n) {
  return copy(dst, kDev, host(src), kAny, n, kSync, "cuMemcpyHtoD_v2");
}
CUresult impl::cuMemcpyHtoD_v2_ptds(CUdeviceptr_v2 dst, const void* src, size_t n) {
  return copy(dst, kDev, host(src), kAny, n, kSyncPerThread, "cuMemcpyHtoD_v2_ptds");
}
CUresult impl::cuMemcpyDtoH_v2(void* dst, CUdeviceptr_v2 src, size_t n) {
  return copy(host(dst), kAny, src, kDev, n, kSync, "cuMemcpyDtoH_v2");
}
CUresult impl::cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr_v2 src, size_t n) {
  return copy(host(dst), kAny, src, kDev, n, kSyncPerThread, "cuMemcpyDtoH_v2_ptds");
}
CUresult impl::cuMemcpyDtoD_v2(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kDev, src, kDev, n, kSync, "cuMemcpyDtoD_v2");
}
CUresult impl::cuMemcpyDtoD_v2_ptds(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kDev, src, kDev, n, kSyncPerThread, "cuMemcpyDtoD_v2_ptds");
}
namespace {
// A copy between device memory and an array (arrays.h): device to device, synchronous.
CUresult to_array(CUarray array, std::size_t offset, CUdeviceptr src, std::size_t n, Submission how, const char* call) {
  CUdeviceptr at = 0;
  if (CUresult status = array_range(array, offset, n, &at); status != CUDA_SUCCESS) return status;
  return copy(at, kDev, src, kDev, n, how, call);
}
CUresult from_array(CUdeviceptr dst, CUarray array, std::size_t offset, std::size_t n, Submission how, const char* call) {
  CUdeviceptr at = 0;
  if (CUresult status = array_range(array, offset, n, &at); status != CUDA_SUCCESS) return status;
  return copy(dst, kDev, at, kDev, n, how, call);
}
}  // namespace

CUresult impl::cuMemcpyDtoA_v2(CUarray dst, size_t offset, CUdeviceptr_v2 src, size_t n) {
  return to_array(dst, offset, src, n, kSync, "cuMemcpyDtoA_v2");
}
CUresult impl::cuMemcpyDtoA_v2_ptds(CUarray dst, size_t offset, CUdeviceptr_v2 src, size_t n) {
  return to_array(dst, offset, src, n, kSyncPerThread, "cuMemcpyDtoA_v2_ptds");
}
CUresult impl::cuMemcpyAtoD_v2(CUdeviceptr_v2 dst, CUarray src, size_t offset, size_t n) {
  return from_array(dst, src, offset, n, kSync, "cuMemcpyAtoD_v2");
}
CUresult impl::cuMemcpyAtoD_v2_ptds(CUdeviceptr_v2 dst, CUarray src, size_t offset, size_t n) {
  return from_array(dst, src, offset, n, kSyncPerThread, "cuMemcpyAtoD_v2_ptds");
}

CUresult impl::cuMemcpyAsync(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kAny, src, kAny, n, on(s), "cuMemcpyAsync");
}
CUresult impl::cuMemcpyAsync_ptsz(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kAny, src, kAny, n, on_per_thread(s), "cuMemcpyAsync_ptsz");
}
CUresult impl::cuMemcpyHtoDAsync_v2(CUdeviceptr_v2 dst, const void* src, size_t n, CUstream s) {
  return copy(dst, kDev, host(src), kAny, n, on(s), "cuMemcpyHtoDAsync_v2");
}
CUresult impl::cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr_v2 dst, const void* src, size_t n, CUstream s) {
  return copy(dst, kDev, host(src), kAny, n, on_per_thread(s), "cuMemcpyHtoDAsync_v2_ptsz");
}
CUresult impl::cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(host(dst), kAny, src, kDev, n, on(s), "cuMemcpyDtoHAsync_v2");
}
CUresult impl::cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(host(dst), kAny, src, kDev, n, on_per_thread(s), "cuMemcpyDtoHAsync_v2_ptsz");
}
CUresult impl::cuMemcpyDtoDAsync_v2(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kDev, src, kDev, n, on(s), "cuMemcpyDtoDAsync_v2");
}
CUresult impl::cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kDev, src, kDev, n, on_per_thread(s), "cuMemcpyDtoDAsync_v2_ptsz");
}
CUresult impl::cuMemsetD8_v2(CUdeviceptr_v2 dst, unsigned char v, size_t n) {
  return fill(dst, v, n, kSync, "cuMemsetD8_v2");
}
CUresult impl::cuMemsetD8_v2_ptds(CUdeviceptr_v2 dst, unsigned char v, size_t n) {
  return fill(dst, v, n, kSyncPerThread, "cuMemsetD8_v2_ptds");
}
CUresult impl::cuMemsetD16_v2(CUdeviceptr_v2 dst, unsigned short v, size_t n) {
  return fill(dst, v, n, kSync, "cuMemsetD16_v2");
}
CUresult impl::cuMemsetD16_v2_ptds(CUdeviceptr_v2 dst, unsigned short v, size_t n) {
  return fill(dst, v, n, kSyncPerThread, "cuMemsetD16_v2_ptds");
}
CUresult impl::cuMemsetD32_v2(CUdeviceptr_v2 dst, unsigned int v, size_t n) {
  return fill(dst, v, n, kSync, "cuMemsetD32_v2");
}
CUresult impl::cuMemsetD32_v2_ptds(CUdeviceptr_v2 dst, unsigned int v, size_t n) {
  return fill(dst, v, n, kSyncPerThread, "cuMemsetD32_v2_ptds");
}
CUresult impl::cuMemsetD8Async(CUdeviceptr_v2 dst, unsigned char v, size_t n, CUstream s) {
  return fill(dst, v, n, on(s), "cuMemsetD8Async");
}
CUresult impl::cuMemsetD8Async_ptsz(CUdeviceptr_v2 dst, unsigned char v, size_t n, CUstream s) {
  return fill(dst, v, n, on_per_thread(s), "cuMemsetD8Async_ptsz");
}
CUresult impl::cuMemsetD16Async(CUdeviceptr_v2 dst, unsigned short v, size_t n, CUstream s) {
  return fill(dst, v, n, on(s), "cuMemsetD16Async");
}
CUresult impl::cuMemsetD16Async_ptsz(CUdeviceptr_v2 dst, unsigned short v, size_t n, CUstream s) {
  return fill(dst, v, n, on_per_thread(s), "cuMemsetD16Async_ptsz");
}
CUresult impl::cuMemsetD32Async(CUdeviceptr_v2 dst, unsigned int v, size_t n, CUstream s) {
  return fill(dst, v, n, on(s), "cuMemsetD32Async");
}
CUresult impl::cuMemsetD32Async_ptsz(CUdeviceptr_v2 dst, unsigned int v, size_t n, CUstream s) {
  return fill(dst, v, n, on_per_thread(s), "cuMemsetD32Async_ptsz");
}

}  // namespace uvmpool::sim
