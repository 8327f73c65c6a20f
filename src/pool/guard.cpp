// UVMPOOL_GUARD: out-of-bounds and use-after-free detection in the manner of GLake's guard mode, for
// debugging (docs/configuration.md, "Guard mode").
//
// Every allocation, whatever its size, is a mapping of its own: ceil(size / chunk) chunks (device
// chunks first, host chunks after when spilling, as any mapping) in an address range one chunk
// longer, whose last chunk is never mapped. The pointer handed out is the mapping's end less the size
// rounded up to 256 bytes, so the first byte past the allocation's rounded end is unmapped: a kernel
// that reads or writes past the end faults (CUDA_ERROR_ILLEGAL_ADDRESS) instead of reaching a
// neighbour. The slack between the size asked for and the guard is under 256 bytes: the pointer must
// keep cudaMalloc's 256-byte alignment. Accesses before the start land in the mapping's front slack
// and go unnoticed.
//
// A free waits for the work that may still use the memory (fence_unmap, as before any unmap), unmaps
// at once and gives the chunks back; the address range itself stays out of use for a while, so a
// stale pointer faults rather than reach a later allocation. No slabs, no cached mappings, no
// stream-ordered reuse: each would keep freed memory mapped or put allocations side by side.
#include "config/log.h"
#include "pool/device_pool.h"

namespace uvmpool::pool {

CUresult DevicePool::allocate_guarded(CUdeviceptr* out, std::size_t bytes, CUcontext context) {
  Block* b = nullptr;
  {
    MutexLock lock(mu_);
    // One chunk of address space past the mapping: the granularity is the least that can stay unmapped.
    if (const CUresult r = map_new_block(div_ceil(bytes, chunk_), chunk_, &b); r != CUDA_SUCCESS) return r;
  }
  publish(b, bytes, context, out, false);
  return CUDA_SUCCESS;
}

CUresult DevicePool::free_guarded(Block* b, CUdeviceptr p, CUcontext wait_for) {
  if (const CUdeviceptr start = b->start(b->size.load(std::memory_order_relaxed), chunk_); p != start) {
    log::error("free of {:#x}: an interior pointer of a pool allocation at {:#x}; ignored", p, start);
    return CUDA_ERROR_INVALID_VALUE;
  }
  int expected = kLive;
  if (!b->state.compare_exchange_strong(expected, kQuarantined, std::memory_order_acq_rel)) {
    log::error("free of {:#x}: already freed (double free); ignored", p);
    return CUDA_ERROR_INVALID_VALUE;
  }
  unpublish(b, false);
  // Once exit has begun the pool makes no driver call: the memory stays mapped, never reused.
  if (process_exiting()) return CUDA_SUCCESS;
  MutexLock lock(mu_);
  // Noted under mu_ and fenced at once by destroy_block, so this free's own context is waited for
  // (with any other context that freed since the last fence).
  note_sync_free(wait_for != nullptr ? wait_for : b->context.load(std::memory_order_relaxed));
  destroy_block(b);  // unmaps; the range goes to retire_guarded
  return CUDA_SUCCESS;
}

void DevicePool::retire_guarded(CUdeviceptr va, std::size_t bytes) {
  // The range allocator is best fit: a range given back at once would be the next allocation of the
  // same size, and a use after free would silently reach it. So freed ranges wait, oldest given back
  // first, while more than the device's memory size of address space waits (the pool reserves four
  // times that, and more regions when it runs short).
  guard_retired_.emplace_back(va, bytes);
  guard_retired_bytes_ += bytes;
  while (guard_retired_bytes_ > total_ && !guard_retired_.empty()) {
    const auto [old_va, old_bytes] = guard_retired_.front();
    guard_retired_.pop_front();
    guard_retired_bytes_ -= old_bytes;
    ranges_.give_back(old_va, old_bytes);
  }
}

bool guard_refuses_free(bool guard, const AddressMap& map, CUdeviceptr p, CUresult* result) {
  if (!guard || !map.contains(p)) return false;
  log::error("free of {:#x}: not a live pool allocation (UVMPOOL_GUARD unmaps freed memory: a double free, or a "
             "pointer past an allocation's end); ignored",
             p);
  *result = CUDA_ERROR_INVALID_VALUE;
  return true;
}

}  // namespace uvmpool::pool
