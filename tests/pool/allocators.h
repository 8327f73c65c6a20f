// The allocators the typed suites run over (RMM style: each behaviour is written once and checked for
// every implementation). The driver's own cuMemAlloc/cuMemFree is the reference: a behaviour the
// pool's forms do not share with it is a pool bug.
#pragma once

#include <memory>
#include <string>

#include "pool_test.h"

namespace pooltest {

// cuMemAlloc / cuMemFree straight to the driver.
struct NativeDriver {
  void start() {}
  void stop() {}
  CUresult allocate(CUdeviceptr* p, std::size_t bytes) { return drv().cuMemAlloc_v2(p, bytes); }
  CUresult deallocate(CUdeviceptr p) { return drv().cuMemFree_v2(p); }
  // cuMemGetAddressRange's answer.
  CUresult range(CUdeviceptr p, CUdeviceptr* base, std::size_t* size) {
    return drv().cuMemGetAddressRange_v2(base, size, p);
  }
  Pool* pool() { return nullptr; }
};

// What every pool form shares: its own Pool, and find() as cuMemGetAddressRange.
struct PoolBase {
  static PoolConfig config() { return test_config(); }
  void start() { pool_ = std::make_unique<Pool>(drv(), config()); }
  void stop() { pool_.reset(); }
  CUresult range(CUdeviceptr p, CUdeviceptr* base, std::size_t* size) {
    auto info = pool_->find(p);
    if (!info) return CUDA_ERROR_NOT_FOUND;
    *base = info->base;
    *size = info->size;
    return CUDA_SUCCESS;
  }
  Pool* pool() { return pool_.get(); }
  std::unique_ptr<Pool> pool_;
};

// Pool::allocate / Pool::deallocate.
struct PoolSync : PoolBase {
  CUresult allocate(CUdeviceptr* p, std::size_t bytes) { return pool_->allocate(p, bytes); }
  CUresult deallocate(CUdeviceptr p) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    // A foreign answer for the pool's own pointer is reported as CUDA_ERROR_NOT_FOUND.
    return pool_->deallocate(p, &r) == Ownership::Ours ? r : CUDA_ERROR_NOT_FOUND;
  }
};

// Pool::allocate_async / deallocate_async on one stream.
template <typename StreamKind, typename Base = PoolBase>
struct PoolAsync : Base {
  using Base::pool_;
  void start() {
    Base::start();
    stream_ = StreamKind::make();
  }
  void stop() {
    if (stream_ != nullptr && StreamKind::kCreated) drv().cuStreamDestroy_v2(stream_);
    Base::stop();
  }
  CUresult allocate(CUdeviceptr* p, std::size_t bytes) { return pool_->allocate_async(p, bytes, stream_); }
  CUresult deallocate(CUdeviceptr p) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    return pool_->deallocate_async(p, stream_, &r) == Ownership::Ours ? r : CUDA_ERROR_NOT_FOUND;
  }
  CUstream stream_ = nullptr;
};

struct CreatedStream {
  static constexpr bool kCreated = true;
  static CUstream make() {
    CUstream s = nullptr;
    EXPECT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
  }
};
struct LegacyDefaultStream {  // stream 0
  static constexpr bool kCreated = false;
  static CUstream make() { return nullptr; }
};
struct PerThreadDefaultStream {  // what the _ptsz hooks pass for stream 0
  static constexpr bool kCreated = false;
  static CUstream make() { return CU_STREAM_PER_THREAD; }
};

using PoolAsyncCreatedStream = PoolAsync<CreatedStream>;
using PoolAsyncDefaultStream = PoolAsync<LegacyDefaultStream>;
using PoolAsyncPerThreadStream = PoolAsync<PerThreadDefaultStream>;

// The same with carving on (UVMPOOL_CARVE_MAX): requests up to 256 MiB carved from extents mapped once.
struct CarvingBase : PoolBase {
  static PoolConfig config() {
    PoolConfig c = test_config();
    c.carve_max = 256 * kMiB;
    return c;
  }
  void start() { pool_ = std::make_unique<Pool>(drv(), config()); }
};
struct PoolCarvingSync : CarvingBase {
  CUresult allocate(CUdeviceptr* p, std::size_t bytes) { return pool_->allocate(p, bytes); }
  CUresult deallocate(CUdeviceptr p) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    return pool_->deallocate(p, &r) == Ownership::Ours ? r : CUDA_ERROR_NOT_FOUND;
  }
};
using PoolCarvingAsyncCreatedStream = PoolAsync<CreatedStream, CarvingBase>;

using AllAllocators = ::testing::Types<NativeDriver, PoolSync, PoolAsyncCreatedStream, PoolAsyncDefaultStream,
                                       PoolAsyncPerThreadStream, PoolCarvingSync, PoolCarvingAsyncCreatedStream>;

}  // namespace pooltest
