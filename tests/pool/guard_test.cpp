// UVMPOOL_GUARD (PoolConfig::guard): every allocation is a mapping of its own whose end, rounded up
// to 256 bytes, meets address space that is never mapped, and a free unmaps at once. So a kernel
// writing one element past an allocation's end faults (CUDA_ERROR_ILLEGAL_ADDRESS, sticky), where
// without guard it writes into the neighbour; a use after free faults too. Lookups, double frees,
// spill, the statistics and the fence against unfinished work keep working.
#include <dlfcn.h>

#include <random>

#include "spill_test.h"
// After the driver's headers, which include cuda.h their own way (sim_control.h includes it plainly).
#include "sim/sim_control.h"

namespace pooltest {
namespace {

constexpr std::size_t kAlign = 256;

std::size_t round_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

PoolConfig guard_config(PoolConfig c = test_config()) {
  c.guard = true;
  return c;
}

class Guard : public SpillTest {
 protected:
  void SetUp() override {
    SpillTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_CU(drv().cuModuleLoadData(&module, UVMPOOL_SIM_MODULE_IMAGE));
    ASSERT_CU(drv().cuModuleGetFunction(&fill_u32, module, "uvmpool_fill_u32"));
    violations = reinterpret_cast<unsigned long long (*)()>(
        dlsym(uvmpool::driver::real()->handle, "uvmpool_sim_violations"));
    ASSERT_NE(violations, nullptr) << "the simulated driver has no uvmpool_sim_violations";
  }

  // uvmpool_fill_u32(dst, count, value) on `stream`: dst[i] = value for i < count.
  CUresult fill_words(CUdeviceptr dst, std::uint64_t count, std::uint32_t value, CUstream stream = nullptr) {
    void* params[] = {&dst, &count, &value};
    return drv().cuLaunchKernel(fill_u32, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  }
  // Whether the driver has anything mapped at `at` ('?' from SpillTest::tier_at: nothing).
  static bool mapped(CUdeviceptr at) { return tier_at(at) != '?'; }
  static std::uint32_t word_at(CUdeviceptr at) {
    std::uint32_t w = 0;
    EXPECT_CU(drv().cuMemcpyDtoH_v2(&w, at, sizeof w));
    return w;
  }

  CUmodule module = nullptr;
  CUfunction fill_u32 = nullptr;
  unsigned long long (*violations)() = nullptr;
};

// Without guard two small allocations of one size class are neighbours in a slab: a kernel writing
// one element past the first one's end succeeds and changes the second. This is what guard mode is for.
TEST_F(Guard, WithoutGuardAWritePastTheEndSilentlyReachesTheNeighbour) {
  auto pool = make_pool(test_config());
  const CUdeviceptr a = must_allocate(*pool, 4096);
  const CUdeviceptr b = must_allocate(*pool, 4096);
  ASSERT_EQ(b, a + 4096) << "slots of one slab, side by side";
  ASSERT_CU(drv().cuMemsetD32_v2(b, 0x11111111, 1024));
  ASSERT_CU(fill_words(a, 1024 + 1, 0xdeadbeef));
  EXPECT_CU(drv().cuCtxSynchronize()) << "no fault without guard";
  EXPECT_EQ(word_at(b), 0xdeadbeefu) << "the neighbour's first word was overwritten";
  EXPECT_EQ(word_at(b + 4), 0x11111111u);
}

TEST_F(Guard, AKernelWritingOneElementPastTheEndFaults) {
  auto pool = make_pool(guard_config());
  const CUdeviceptr a = must_allocate(*pool, 4096);
  const CUdeviceptr b = must_allocate(*pool, 4096);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  ASSERT_CU(drv().cuMemsetD32_v2(b, 0x11111111, 1024));
  // Up to the end is fine.
  ASSERT_CU(fill_words(a, 1024, 7));
  ASSERT_CU(drv().cuCtxSynchronize());
  EXPECT_EQ(word_at(a + 4092), 7u);
  // One element more: the next byte is the guard.
  ASSERT_FALSE(mapped(a + 4096));
  ASSERT_CU(fill_words(a, 1024 + 1, 0xdeadbeef));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, drv().cuCtxSynchronize());
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, drv().cuStreamSynchronize(nullptr)) << "sticky, as on a GPU";
  // The neighbour is untouched. Copies fail once the context has faulted, but the simulator's
  // device memory is host memory at the same address, so the test reads it directly.
  EXPECT_EQ(*reinterpret_cast<const volatile std::uint32_t*>(b), 0x11111111u);
}

// The end of every allocation, rounded up to 256 bytes, meets unmapped address space; the pointer
// keeps cudaMalloc's 256-byte alignment; lookups answer the allocation, interior pointers included,
// and nothing past its end or before its start.
TEST_F(Guard, EveryAllocationEndsAtTheGuardWithLessThan256BytesOfSlack) {
  auto pool = make_pool(guard_config());
  std::vector<std::size_t> sizes = {1,           100,       255,           256,       257,
                                    4095,        4096,      65537,         kMiB - 1,  kMiB,
                                    kMiB + 1,    2 * kMiB - 1, 2 * kMiB,   2 * kMiB + 1, 7 * kMiB + 300};
  std::mt19937_64 random(17);
  for (int i = 0; i < 30; ++i) sizes.push_back(1 + random() % (2 * kMiB));
  std::vector<Block> live;
  for (std::size_t bytes : sizes) {
    const CUdeviceptr p = must_allocate(*pool, bytes);
    ASSERT_NE(p, 0u) << bytes;
    const CUdeviceptr end = p + round_up(bytes);
    EXPECT_EQ(p % kAlign, 0u) << bytes;
    EXPECT_LT(end - (p + bytes), kAlign) << bytes;
    EXPECT_TRUE(mapped(p)) << bytes;
    EXPECT_TRUE(mapped(end - 1)) << bytes;
    EXPECT_FALSE(mapped(end)) << "the guard after " << bytes << " bytes";
    const auto first = pool->find(p);
    const auto last = pool->find(p + bytes - 1);
    ASSERT_TRUE(first && last) << bytes;
    EXPECT_EQ(first->base, p);
    EXPECT_EQ(first->size, bytes);
    EXPECT_EQ(last->base, p);
    EXPECT_FALSE(pool->find(p + bytes)) << "past the end, in the slack: " << bytes;
    EXPECT_FALSE(pool->find(end)) << "the guard: " << bytes;
    if (p % gran != 0) {
      EXPECT_FALSE(pool->find(p - 1)) << "before the start, in the mapping's front slack: " << bytes;
    }
    live.push_back({p, bytes, 0});
  }
  EXPECT_TRUE(disjoint(live));
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, sizes.size());
  EXPECT_EQ(s.stitched_maps, sizes.size()) << "a mapping of its own each, small ones too";
  for (const Block& b : live) must_free(*pool, b.p);
  s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.frees, sizes.size());
  EXPECT_EQ(s.chunks_cached, 0u) << "nothing stays mapped";
  EXPECT_EQ(s.chunks_free, s.chunks_held) << "every chunk unmapped, back in the free list";
  for (const Block& b : live) EXPECT_FALSE(mapped(b.p)) << "freed memory is unmapped at once";
}

TEST_F(Guard, UseAfterFreeFaultsEvenOnceTheSameSizeIsAllocatedAgain) {
  auto pool = make_pool(guard_config());
  const CUdeviceptr a = must_allocate(*pool, 64 * kKiB);
  ASSERT_CU(fill_words(a, 16 * kKiB, 1));
  must_free(*pool, a);
  EXPECT_FALSE(mapped(a));
  // The freed range is not handed out again at once (the allocator is best fit: it would be).
  const CUdeviceptr b = must_allocate(*pool, 64 * kKiB);
  EXPECT_NE(b, a);
  EXPECT_FALSE(mapped(a));
  EXPECT_FALSE(pool->find(a));
  ASSERT_CU(drv().cuCtxSynchronize());
  ASSERT_CU(fill_words(a, 1, 2));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, drv().cuCtxSynchronize());
}

// Without guard, the same sequence reuses the freed slot: the stale pointer writes into the new
// allocation and nothing notices.
TEST_F(Guard, WithoutGuardUseAfterFreeSilentlyReachesTheNextAllocation) {
  auto pool = make_pool(test_config());
  const CUdeviceptr a = must_allocate(*pool, 64 * kKiB);
  must_free(*pool, a);
  const CUdeviceptr b = must_allocate(*pool, 64 * kKiB);
  ASSERT_EQ(b, a);
  ASSERT_CU(fill_words(a, 1, 2));
  EXPECT_CU(drv().cuCtxSynchronize());
  EXPECT_EQ(word_at(b), 2u);
}

TEST_F(Guard, FreedRangesComeBackOnlyAfterTheDevicesMemoryOfOthersWasFreed) {
  auto pool = make_pool(guard_config());
  const CUdeviceptr first = must_allocate(*pool, 4 * kMiB);
  must_free(*pool, first);
  // Each allocation retires 3 chunks of address space (2 mapped, 1 guard): the device's 256 MiB
  // take 43 of them; the first range may come back only after that.
  bool back = false;
  int rounds = 0;
  for (; rounds < 100 && !back; ++rounds) {
    const CUdeviceptr p = must_allocate(*pool, 4 * kMiB);
    back = p == first;
    must_free(*pool, p);
  }
  EXPECT_TRUE(back) << "freed address space is reused eventually";
  EXPECT_GE(rounds, static_cast<int>(total / (6 * kMiB))) << "but not before the device's memory of it was freed";
}

TEST_F(Guard, DoubleFreesInteriorAndForeignPointersGiveTheirErrors) {
  auto pool = make_pool(guard_config());
  const CUdeviceptr p = must_allocate(*pool, 1000);
  CUresult r = CUDA_SUCCESS;
  EXPECT_EQ(pool->deallocate(p + 256, &r), Ownership::Ours);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "an interior pointer";
  r = CUDA_SUCCESS;
  EXPECT_EQ(pool->deallocate(p + round_up(1000), &r), Ownership::Ours) << "the guard is the pool's";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r);
  EXPECT_TRUE(pool->find(p)) << "the refused frees left it alone";
  must_free(*pool, p);
  r = CUDA_SUCCESS;
  EXPECT_EQ(pool->deallocate(p, &r), Ownership::Ours) << "unmapped, but still in the pool's address space";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "a double free";
  r = CUDA_SUCCESS;
  EXPECT_EQ(pool->deallocate_async(p, nullptr, &r), Ownership::Ours);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "a double free, stream-ordered";
  // Memory the driver allocated is not the pool's.
  CUdeviceptr native = 0;
  ASSERT_CU(drv().cuMemAlloc_v2(&native, 4096));
  EXPECT_EQ(pool->deallocate(native, &r), Ownership::Foreign);
  EXPECT_CU(drv().cuMemFree_v2(native));
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
}

// A free unmaps only once the work queued before it is done: the race detector would flag an unmap
// under the kernel (and fail the context).
TEST_F(Guard, FreesWaitForQueuedWorkBeforeUnmapping) {
  auto pool = make_pool(guard_config());
  CUstream stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const unsigned long long before = violations();
  for (const bool async : {false, true}) {
    const CUdeviceptr p = must_allocate(*pool, 64 * kMiB);
    ASSERT_CU(fill_words(p, 16 * kMiB, 3, stream));  // about 16 us of modeled work at 4 TB/s
    CUresult r = CUDA_ERROR_UNKNOWN;
    const unsigned long long waits = wait_calls();
    if (async) {
      EXPECT_EQ(pool->deallocate_async(p, stream, &r), Ownership::Ours);
    } else {
      EXPECT_EQ(pool->deallocate(p, &r), Ownership::Ours);
    }
    EXPECT_CU(r);
    EXPECT_GT(wait_calls(), waits) << (async ? "cuMemFreeAsync" : "cuMemFree") << " waited for the device";
    EXPECT_FALSE(mapped(p)) << "and unmapped at once";
  }
  EXPECT_EQ(violations(), before) << "nothing was unmapped under unfinished work";
  EXPECT_CU(drv().cuCtxSynchronize());
  EXPECT_CU(drv().cuStreamDestroy_v2(stream));
}

TEST_F(Guard, StreamOrderedAllocationsAreGuardedToo) {
  auto pool = make_pool(guard_config());
  CUstream stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p = 0;
  ASSERT_CU(pool->allocate_async(&p, 3 * kMiB, stream));
  EXPECT_FALSE(mapped(p + 3 * kMiB));
  CUresult r = CUDA_ERROR_UNKNOWN;
  EXPECT_EQ(pool->deallocate_async(p, stream, &r), Ownership::Ours);
  EXPECT_CU(r);
  CUdeviceptr q = 0;
  ASSERT_CU(pool->allocate_async(&q, 3 * kMiB, stream));
  EXPECT_NE(q, p) << "not reused on the stream: the freed range is unmapped";
  EXPECT_FALSE(mapped(p));
  EXPECT_EQ(pool->deallocate_async(q, stream, &r), Ownership::Ours);
  EXPECT_CU(r);
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
  EXPECT_CU(drv().cuStreamDestroy_v2(stream));
}

// Past the device limit the rest of an allocation lies in host chunks, mapped after the device ones
// as without guard, and the guard follows the host part.
TEST_F(Guard, SpilledAllocationsEndAtTheGuardToo) {
  auto pool = make_pool(guard_config(spill_config(64 * kMiB)));
  pool->stop_background();
  const std::size_t dev = device_chunks(64 * kMiB);
  const std::size_t bytes = 100 * kMiB + 12345;  // 51 chunks, the first one partly used
  const std::size_t chunks = (bytes + gran - 1) / gran;
  const CUdeviceptr p = must_allocate(*pool, bytes);
  ASSERT_NE(p, 0u);
  const CUdeviceptr end = p + round_up(bytes);
  EXPECT_EQ(end % gran, 0u) << "the allocation ends at the mapping's end";
  EXPECT_EQ(tiers(p, bytes, gran), layout(dev, chunks - dev)) << "device chunks first, then host ones";
  EXPECT_FALSE(mapped(end));
  // The host part: all of the allocation past the device chunks.
  const CUdeviceptr host_from = end - (chunks - dev) * gran;
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, p + bytes - host_from);
  EXPECT_EQ(s.spilled_allocations, 1u);
  fill(p, bytes, 9);
  EXPECT_TRUE(holds_sampled(p, bytes, 9, gran));
  // A small allocation now is wholly host, guarded as well.
  const CUdeviceptr small = must_allocate(*pool, 300);
  EXPECT_EQ(tiers(small, 300, gran), "H");
  EXPECT_FALSE(mapped(small + round_up(300)));
  EXPECT_EQ(pool->stats(0).live_host_bytes, p + bytes - host_from + 300);
  ASSERT_CU(fill_words(small, round_up(300) / 4, 5));
  EXPECT_CU(drv().cuCtxSynchronize());
  must_free(*pool, small);
  must_free(*pool, p);
  s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, 0u);
  EXPECT_EQ(s.host_chunks_mapped, 0u) << "host chunks unmapped at once too";
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

}  // namespace
}  // namespace pooltest
