// The backend that serves device memory from the pool, and passes the driver what is not the pool's:
// pointers it did not allocate, explicit memory pools, allocations on a capturing stream (the graph
// owns those), devices without VMM.

#include <algorithm>
#include <atomic>
#include <mutex>

#include "config/log.h"
#include "config/options.h"
#include "config/quiet_at_fork.h"
#include "driver/pointer_attribute_values.h"
#include "hooks/backend.h"
#include "hooks/ipc.h"
#include "pool/pool.h"
#include "stats/counters.h"
#include "stats/publisher.h"
#include "tiering/streams.h"
#include "trace/trace.h"

namespace uvmpool::hooks {
namespace {

// cuMemAllocPitch's row alignment: what NVIDIA's driver gives on current GPUs, and enough for
// texture binding on all of them.
constexpr std::size_t kPitchAlignment = 512;

// The attributes that describe an allocation rather than the memory under it: for pool memory the
// driver would answer them for a chunk mapping, so the pool answers them for the allocation.
// Memory type and device too: a spilled piece lies in host memory, but to the program the whole
// allocation is device memory of the device it allocated on.
bool describes_allocation(CUpointer_attribute a) {
  return a == CU_POINTER_ATTRIBUTE_CONTEXT || a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
         a == CU_POINTER_ATTRIBUTE_RANGE_SIZE || a == CU_POINTER_ATTRIBUTE_BUFFER_ID ||
         a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
}

void answer(const pool::AllocationInfo& info, CUpointer_attribute a, void* data) {
  switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = info.context; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = info.base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data) = info.size; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = info.buffer_id; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = info.device; break;
    default: break;
  }
}

class PoolBackend final : public Backend {
 public:
  explicit PoolBackend(pool::Pool& pool) : pool_(pool), driver_(driver_backend()) {}

  CUresult alloc(CUdeviceptr* dptr, std::size_t bytes) override {
    const CUresult r = pool_.allocate(dptr, bytes);
    return r == CUDA_ERROR_NOT_SUPPORTED ? by_driver(driver_.alloc(dptr, bytes), dptr, bytes) : by_pool(r);
  }
  CUresult alloc_pitch(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width, std::size_t height,
                       unsigned element_bytes) override {
    if (width == 0 || height == 0 || (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const std::size_t row = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
    if (row < width || height > SIZE_MAX / row) return CUDA_ERROR_INVALID_VALUE;
    const CUresult r = pool_.allocate(dptr, row * height);
    if (r == CUDA_ERROR_NOT_SUPPORTED) return by_driver(driver_.alloc_pitch(dptr, pitch, width, height, element_bytes), dptr, width * height);
    if (r == CUDA_SUCCESS) *pitch = row;
    return by_pool(r);
  }
  CUresult free(CUdeviceptr ptr) override {
    CUresult r = CUDA_SUCCESS;
    if (ipc::take_free(ptr, &r)) return r;  // exported and still open in another process: freed at its close
    if (pool_.deallocate(ptr, &r) == pool::Ownership::Ours) return r;
    // Not the pool's: the driver's cuMemFree waits for the device, so behind a mover's hold it would keep
    // the mover's own driver calls out (tiering/host_wait_gate.h). It waits at the gate instead.
    const tiering::HostWaitGate::Pass pass(tiering::StreamRegistry::process().host_waits());
    return freed_by_driver(driver_.free(ptr), ptr);
  }
  CUresult get_info(std::size_t* free_bytes, std::size_t* total_bytes) override {
    return pool_.memory_info(free_bytes, total_bytes);
  }
  CUresult address_range(CUdeviceptr* base, std::size_t* size, CUdeviceptr ptr) override {
    const auto info = pool_.find(ptr);
    // Pool address space outside a live allocation is, to the program, memory nobody allocated:
    // the driver would describe the chunk mapped there, so the pool answers as for unknown memory.
    if (!info) return pool_.in_pool_space(ptr) ? CUDA_ERROR_NOT_FOUND : driver_.address_range(base, size, ptr);
    if (base != nullptr) *base = info->base;
    if (size != nullptr) *size = info->size;
    return CUDA_SUCCESS;
  }
  CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) override {
    if (attribute == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE) {
      if (const auto view = pool_.chunks_of(ptr)) {
        *static_cast<int*>(data) = view->exportable ? 1 : 0;  // cuIpcGetMemHandle works on it (ipc.h)
        return CUDA_SUCCESS;
      }
    }
    if (describes_allocation(attribute)) {
      if (const auto info = pool_.find(ptr)) {
        answer(*info, attribute, data);
        return CUDA_SUCCESS;
      }
    }
    // Pool address space outside a live allocation (freed memory the pool keeps mapped, a free held
    // through a capture) is, to the program, freed memory: the driver calls such a pointer invalid,
    // where it would describe the chunk the pool keeps mapped there.
    if (data != nullptr && !pool_.find(ptr) && pool_.in_pool_space(ptr)) return CUDA_ERROR_INVALID_VALUE;
    return driver_.pointer_attribute(data, attribute, ptr);
  }
  CUresult pointer_attributes(unsigned count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) override {
    // The driver answers for the memory (type, device, mapped...) and checks the arguments; the pool
    // then corrects what describes the allocation.
    const CUresult r = driver_.pointer_attributes(count, attributes, data, ptr);
    if (r != CUDA_SUCCESS) return r;
    const auto info = pool_.find(ptr);
    if (!info && pool_.in_pool_space(ptr)) {
      // Freed memory, as above: the driver's defaults for a pointer it does not know.
      for (unsigned i = 0; i < count; ++i)
        if (data[i] != nullptr) driver::write_unknown_pointer_attribute(attributes[i], ptr, data[i]);
      return CUDA_SUCCESS;
    }
    if (info) {
      for (unsigned i = 0; i < count; ++i) {
        if (data[i] != nullptr && describes_allocation(attributes[i])) answer(*info, attributes[i], data[i]);
        if (data[i] != nullptr && attributes[i] == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE) {
          const auto view = pool_.chunks_of(ptr);
          *static_cast<int*>(data[i]) = view && view->exportable ? 1 : 0;
        }
      }
    }
    return CUDA_SUCCESS;
  }
  CUresult alloc_async(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) override {
    // NOT_SUPPORTED also covers a capturing stream: the driver makes a graph allocation node, whose
    // address the graph owns.
    const CUresult r = pool_.allocate_async(dptr, bytes, stream);
    return r == CUDA_ERROR_NOT_SUPPORTED ? by_driver(driver_.alloc_async(dptr, bytes, stream), dptr, bytes) : by_pool(r);
  }
  CUresult alloc_from_pool_async(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool mem_pool,
                                 CUstream stream) override {
    // An explicit CUmemoryPool has attributes (IPC, access, release threshold) the program set on
    // purpose: the driver keeps serving it, and its memory counts against the budget as others' do.
    return by_driver(driver_.alloc_from_pool_async(dptr, bytes, mem_pool, stream), dptr, bytes);
  }
  CUresult free_async(CUdeviceptr ptr, CUstream stream) override {
    CUresult r = CUDA_SUCCESS;
    if (ipc::exporting()) {
      const ipc::AsyncFree async{stream, pool_.capturing(stream)};
      if (ipc::take_free(ptr, &r, &async)) return r;
    }
    return pool_.deallocate_async(ptr, stream, &r) == pool::Ownership::Ours ? r : freed_by_driver(driver_.free_async(ptr, stream), ptr);
  }
  CUresult create(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop,
                  unsigned long long flags) override {
    // Device memory counts against the budget; past it (spill on) the handle is made in host memory.
    return pool_.create_external(handle, size, prop, flags);
  }
  CUresult stream_destroy(CUstream stream) override {
    // Before the handle goes (the driver may give it to the next stream created): memory freed on
    // it and not yet reused gets its event now, on the stream that used it.
    pool_.stream_destroying(stream);
    return driver_.stream_destroy(stream);
  }
  CUresult peer_access(CUcontext peer, unsigned flags, bool enable) override {
    return driver_.peer_access(peer, flags, enable);  // the table is process-wide, the driver's backend keeps it
  }
  CUresult ipc_get(CUipcMemHandle* handle, CUdeviceptr ptr) override {
    if (pool_.find(ptr)) return ipc::export_handle(pool_, ptr, handle);
    // Pool address space outside a live allocation: nothing the program may export.
    return pool_.in_pool_space(ptr) ? CUDA_ERROR_INVALID_VALUE : driver_.ipc_get(handle, ptr);
  }
  CUresult ipc_open(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned flags) override {
    return driver_.ipc_open(ptr, handle, flags);
  }
  CUresult ipc_close(CUdeviceptr ptr) override { return driver_.ipc_close(ptr); }
  CUresult retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* addr) override {
    // The driver would answer with the one chunk mapped at addr, while cuMemGetAddressRange answers
    // the whole allocation: a caller mapping that handle at that size (NCCL's buffer registration)
    // would fail or map the wrong memory. Pool memory answers as cuMemAlloc memory does: not VMM
    // memory. NCCL then takes legacy IPC, which uvmpool serves (IS_LEGACY_CUDA_IPC_CAPABLE is 1).
    const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(addr);
    if (pool_.in_pool_space(p)) return CUDA_ERROR_INVALID_VALUE;
    const CUresult r = driver_.retain_allocation_handle(handle, addr);
    if (r == CUDA_SUCCESS) pool_.retained_external(*handle, p);  // one reference more to keep the memory
    return r;
  }
  CUresult allocation_properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) override {
    // A program's own device cuMemCreate that the pool placed in host memory (spill): what the
    // program asked for, as the driver would answer for the handle it expected.
    if (const auto requested = pool_.requested_properties(handle)) {
      *prop = *requested;
      return CUDA_SUCCESS;
    }
    return driver_.allocation_properties(prop, handle);
  }
  CUresult release(CUmemGenericAllocationHandle handle) override {
    const std::uint64_t memory = pool_.releasing_external(handle);  // before its value can be given again
    const CUresult r = driver_.release(handle);
    if (r == CUDA_SUCCESS) pool_.released_external(memory);
    return r;
  }
  // The pool's address space holds pool memory, which the program allocated as cuMemAlloc memory and
  // never reserved: mapping into it or unmapping it would take the pool's pieces from under it. The
  // driver refuses both for cuMemAlloc memory, so they are refused here as it would.
  CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
               unsigned long long flags) override {
    if (pool_.in_pool_space(ptr)) return refused_in_pool_space("cuMemMap", ptr);
    const CUresult r = driver_.map(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS) pool_.mapped_external(ptr, size, handle);
    return r;
  }
  CUresult unmap(CUdeviceptr ptr, size_t size) override {
    if (pool_.in_pool_space(ptr)) return refused_in_pool_space("cuMemUnmap", ptr);
    const CUresult r = driver_.unmap(ptr, size);
    if (r == CUDA_SUCCESS) pool_.unmapped_external(ptr, size);
    return r;
  }

 private:
  static CUresult refused_in_pool_space(const char* call, CUdeviceptr ptr) {
    log::error("{} at {:#x}: uvmpool's memory (allocated with cuMemAlloc or cudaMalloc), not a range the program "
               "reserved; refused",
               call, ptr);
    return CUDA_ERROR_INVALID_VALUE;
  }
  static CUresult by_pool(CUresult r) {
    if (r == CUDA_SUCCESS) stats::count_served(true);
    return r;
  }
  static CUresult by_driver(CUresult r, const CUdeviceptr* p, std::size_t bytes) {
    if (r == CUDA_SUCCESS) {
      stats::count_served(false);
      trace::record(trace::Kind::DriverAlloc, -1, *p, bytes);
    }
    return r;
  }
  static CUresult freed_by_driver(CUresult r, CUdeviceptr p) {
    if (r == CUDA_SUCCESS) trace::record(trace::Kind::DriverFree, -1, p, 0);
    return r;
  }

  pool::Pool& pool_;
  Backend& driver_;
};

}  // namespace

namespace {

std::atomic<Backend*> g_chosen{nullptr};
std::mutex g_choose_mu;

// After fork the pool the parent's backend serves from is abandoned (pool.cpp): the child chooses
// again on its next call, over a fresh pool (the old backend is leaked, as the old pool is).
void forget_backend_in_child() {
  g_chosen.store(nullptr, std::memory_order_relaxed);
  new (&g_choose_mu) std::mutex;
}

}  // namespace

Backend& backend() {
  // The one place that chooses what serves device memory.
  if (Backend* b = g_chosen.load(std::memory_order_acquire)) return *b;
  std::lock_guard lock(g_choose_mu);
  if (Backend* b = g_chosen.load(std::memory_order_relaxed)) return *b;
  static std::once_flag registered;
  std::call_once(registered, [] { config::at_fork(nullptr, nullptr, forget_backend_in_child); });
  Backend* b = &driver_backend();
  if (config::options().pool) {
    if (pool::Pool* pool = pool::Pool::process()) b = new PoolBackend(*pool);  // never destroyed: frees may come during exit
  }
  stats::start_process_observers();  // live statistics and the trace, now that there is something to see (once)
  g_chosen.store(b, std::memory_order_release);
  return *b;
}

}  // namespace uvmpool::hooks
