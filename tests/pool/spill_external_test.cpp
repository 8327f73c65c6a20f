// The program's own cuMemCreate of device memory (Pool::create_external) under spill: within the
// budget it is device memory and counts against the budget; past it the handle is made in pinned
// host memory instead (the program still sees the properties it asked for through
// requested_properties), with or without a current context (NCCL creates from its own threads);
// with spill off it is OUT_OF_MEMORY. And cuMemGetInfo with report_host adds the host tier.
#include "spill_test.h"

namespace pooltest {
namespace {

class SpillExternal : public SpillTest {
 protected:
  // Where the driver put a handle.
  static char handle_tier(CUmemGenericAllocationHandle h) {
    CUmemAllocationProp prop{};
    if (drv().cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS) return '?';
    return location_tier(prop.location);
  }

  // Maps a handle as a program would (device access only), writes and reads it back through it.
  static ::testing::AssertionResult usable(CUmemGenericAllocationHandle h, std::size_t bytes) {
    CUdeviceptr va = 0;
    if (CUresult r = drv().cuMemAddressReserve(&va, bytes, 0, 0, 0); r != CUDA_SUCCESS)
      return ::testing::AssertionFailure() << "cuMemAddressReserve: " << cu_name(r);
    ::testing::AssertionResult result = ::testing::AssertionSuccess();
    CUmemAccessDesc access{};
    access.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult r = drv().cuMemMap(va, bytes, 0, h, 0); r != CUDA_SUCCESS) {
      result = ::testing::AssertionFailure() << "cuMemMap: " << cu_name(r);
    } else {
      if (CUresult r2 = drv().cuMemSetAccess(va, bytes, &access, 1); r2 != CUDA_SUCCESS) {
        result = ::testing::AssertionFailure() << "cuMemSetAccess: " << cu_name(r2);
      } else {
        fill(va, bytes, 99);
        result = holds(va, bytes, 99);
      }
      drv().cuMemUnmap(va, bytes);
    }
    drv().cuMemAddressFree(va, bytes);
    return result;
  }

  // The program maps a counted handle for the device and the cuMemMap hook tells the pool; 0 on failure.
  static CUdeviceptr map_counted(Pool& pool, CUmemGenericAllocationHandle h, std::size_t bytes) {
    CUdeviceptr va = 0;
    EXPECT_CU(drv().cuMemAddressReserve(&va, bytes, 0, 0, 0));
    if (va == 0) return 0;
    CUmemAccessDesc access{};
    access.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const CUresult r = drv().cuMemMap(va, bytes, 0, h, 0);
    EXPECT_CU(r);
    if (r != CUDA_SUCCESS) return 0;
    pool.mapped_external(va, bytes, h);
    EXPECT_CU(drv().cuMemSetAccess(va, bytes, &access, 1));
    return va;
  }
  static constexpr std::size_t kHandle = 24 * kMiB;
  // The pool filling the device (*full), and a handle of kHandle (*h) made past it in host memory and
  // mapped by the program: its address, 0 on failure.
  CUdeviceptr mapped_host_handle(Pool& pool, CUdeviceptr* full, CUmemGenericAllocationHandle* h) {
    *full = must_allocate(pool, room(64 * kMiB));
    const CUmemAllocationProp prop = device_prop(0);
    EXPECT_CU(pool.create_external(h, kHandle, &prop, 0));
    EXPECT_EQ(handle_tier(*h), 'H');
    return *h != 0 ? map_counted(pool, *h, kHandle) : 0;
  }
  // Whether a handle of `bytes` fits the host limit now (made and released at once).
  static bool host_room_for(Pool& pool, std::size_t bytes) {
    const CUmemAllocationProp prop = device_prop(0);
    CUmemGenericAllocationHandle b = 0;
    if (pool.create_external(&b, bytes, &prop, 0) != CUDA_SUCCESS) return false;
    release_external(pool, b);
    return true;
  }
  // Its cuMemUnmap, the hook telling the pool, and the range given back.
  static void unmap_counted(Pool& pool, CUdeviceptr va, std::size_t bytes) {
    EXPECT_CU(drv().cuMemUnmap(va, bytes));
    pool.unmapped_external(va, bytes);
    EXPECT_CU(drv().cuMemAddressFree(va, bytes));
  }
};

TEST_F(SpillExternal, WithinTheBudgetIsADeviceHandleThatCountsAgainstIt) {
  auto pool = make_pool(spill_config(64 * kMiB));
  const CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(pool->create_external(&h, 32 * kMiB, &prop, 0));
  EXPECT_EQ(handle_tier(h), 'D');
  EXPECT_FALSE(pool->requested_properties(h).has_value()) << "placed where asked";
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u);
  EXPECT_EQ(driver_free(), free_at_start - 32 * kMiB);
  // The pool's own allocations now find 32 MiB less of the device: 15 chunks, the rest on the host.
  CUdeviceptr p = must_allocate(*pool, room(64 * kMiB));
  EXPECT_EQ(tiers(p, room(64 * kMiB), gran), layout(device_chunks(64 * kMiB) - 16, 16));
  must_free(*pool, p);
  release_external(*pool, h);
}

TEST_F(SpillExternal, PastTheBudgetIsAHostHandleThatReportsTheRequestedProperties) {
  auto pool = make_pool(spill_config(64 * kMiB));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB) - 10 * kMiB);  // 10 MiB of the device left
  const CUmemAllocationProp prop = device_prop(0);
  const std::size_t driver_before = driver_free();
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(pool->create_external(&h, 16 * kMiB, &prop, 0));  // does not fit: one handle is not split
  EXPECT_EQ(handle_tier(h), 'H');
  EXPECT_EQ(driver_free(), driver_before) << "a host handle takes no device memory";
  auto asked = pool->requested_properties(h);
  ASSERT_TRUE(asked.has_value());
  EXPECT_EQ(asked->location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(asked->location.id, 0);
  EXPECT_EQ(asked->type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(pool->stats(0).external_host_bytes, 16 * kMiB);
  EXPECT_TRUE(usable(h, 16 * kMiB)) << "the program maps it for the device like device memory";
  // The host handle does not count against the device budget: the 10 MiB are still the pool's.
  CUdeviceptr p = must_allocate(*pool, 10 * kMiB);
  EXPECT_EQ(tiers(p, 10 * kMiB, gran), layout(5, 0));
  release_external(*pool, h);
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u);
  EXPECT_FALSE(pool->requested_properties(h).has_value()) << "forgotten once released";
  must_free(*pool, p);
  must_free(*pool, full);
  pool.reset();
  EXPECT_TRUE(host_memory_whole()) << "the external host handle was not released";
}

// NCCL frees a buffer by retaining the handle under its address, releasing that, unmapping and
// releasing the handle: the driver keeps the memory until the last release, and so does the count
// (before, the first release gave back the host limit while the memory was still pinned).
TEST_F(SpillExternal, ARetainedHandleCountsUntilItsLastRelease) {
  auto pool = make_pool(spill_config(64 * kMiB, 32 * kMiB, 0));
  CUdeviceptr full = 0;
  CUmemGenericAllocationHandle h = 0, again = 0;
  const CUdeviceptr va = mapped_host_handle(*pool, &full, &h);
  ASSERT_NE(va, 0u);
  ASSERT_CU(drv().cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + kMiB)));
  pool->retained_external(again, va + kMiB);
  release_external(*pool, again);
  EXPECT_EQ(pool->stats(0).external_host_bytes, kHandle) << "released once of twice";
  EXPECT_FALSE(host_room_for(*pool, 10 * kMiB)) << "the handle's 24 MiB are still pinned: 8 MiB of the limit left";
  unmap_counted(*pool, va, kHandle);
  EXPECT_EQ(pool->stats(0).external_host_bytes, kHandle) << "unmapped, one reference left";
  release_external(*pool, h);
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u);
  EXPECT_EQ(pool->external_handles_live(), 0u);
  EXPECT_TRUE(host_room_for(*pool, kHandle)) << "the host limit was not given back";
  must_free(*pool, full);
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

// A handle released as soon as it is mapped keeps its memory until the unmap, and the count with it.
TEST_F(SpillExternal, AHandleReleasedWhileMappedCountsUntilItsUnmap) {
  auto pool = make_pool(spill_config(64 * kMiB, 32 * kMiB, 0));
  CUdeviceptr full = 0;
  CUmemGenericAllocationHandle h = 0;
  const CUdeviceptr va = mapped_host_handle(*pool, &full, &h);
  ASSERT_NE(va, 0u);
  release_external(*pool, h);
  fill(va, kHandle, 31);
  EXPECT_TRUE(holds(va, kHandle, 31)) << "the driver keeps mapped memory";
  EXPECT_EQ(pool->stats(0).external_host_bytes, kHandle);
  EXPECT_FALSE(host_room_for(*pool, 10 * kMiB));
  unmap_counted(*pool, va, kHandle);
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u);
  EXPECT_TRUE(host_room_for(*pool, kHandle)) << "the host limit was not given back";
  must_free(*pool, full);
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

TEST_F(SpillExternal, IdlePoolMemoryIsGivenBackBeforeSpilling) {
  auto pool = make_pool(spill_config(64 * kMiB));
  must_free(*pool, must_allocate(*pool, room(64 * kMiB)));  // all of the budget cached, idle
  const CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(pool->create_external(&h, 48 * kMiB, &prop, 0));
  EXPECT_EQ(handle_tier(h), 'D') << "idle pool memory should have made room on the device";
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u);
  EXPECT_LE(pool->stats(0).chunks_held, device_chunks(64 * kMiB) - 24);
  release_external(*pool, h);
}

TEST_F(SpillExternal, WorksWithNoCurrentContext) {
  auto pool = make_pool(spill_config(64 * kMiB));
  const CUmemAllocationProp prop = device_prop(0);
  ASSERT_CU(drv().cuCtxSetCurrent(nullptr));
  // First use of the device, from a thread with no context.
  CUmemGenericAllocationHandle d = 0, h = 0;
  ASSERT_CU(pool->create_external(&d, 40 * kMiB, &prop, 0));
  EXPECT_EQ(handle_tier(d), 'D');
  ASSERT_CU(pool->create_external(&h, 40 * kMiB, &prop, 0));
  EXPECT_EQ(handle_tier(h), 'H') << "62 MiB of room, 40 MiB taken: 40 more spill";
  EXPECT_EQ(pool->stats(0).external_host_bytes, 40 * kMiB);
  release_external(*pool, d);
  release_external(*pool, h);
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u);
  ASSERT_CU(drv().cuCtxSetCurrent(ctx));
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

TEST_F(SpillExternal, SpillOffIsOutOfMemoryPastTheBudget) {
  PoolConfig c = spill_config(64 * kMiB);
  c.spill = false;
  auto pool = make_pool(c);
  const CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->create_external(&h, room(64 * kMiB) + gran, &prop, 0));
  EXPECT_EQ(pool->stats(0).out_of_memory, 1u);
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u);
  EXPECT_TRUE(host_memory_whole());
  ASSERT_CU(pool->create_external(&h, room(64 * kMiB), &prop, 0));
  EXPECT_EQ(handle_tier(h), 'D');
  release_external(*pool, h);
}

// Spilled external handles are pinned host memory like the pool's own: the host limit caps them.
TEST_F(SpillExternal, HostHandlesCountAgainstTheHostLimit) {
  auto pool = make_pool(spill_config(64 * kMiB, 32 * kMiB, 0));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  const CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle a = 0, b = 0;
  ASSERT_CU(pool->create_external(&a, 24 * kMiB, &prop, 0));
  EXPECT_EQ(handle_tier(a), 'H');
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->create_external(&b, 10 * kMiB, &prop, 0));
  // The pool's own spill has only the 8 MiB left.
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 10 * kMiB));
  p = must_allocate(*pool, 8 * kMiB);
  EXPECT_EQ(tiers(p, 8 * kMiB, gran), layout(0, 4));
  release_external(*pool, a);
  ASSERT_CU(pool->create_external(&b, 24 * kMiB, &prop, 0)) << " (the host limit was not given back)";
  release_external(*pool, b);
  must_free(*pool, p);
  must_free(*pool, full);
}

// The reserve is the pool's idle pinned memory: a spilled cuMemCreate that only the reserve keeps
// under the host limit should get the room (as idle device memory is given back for a device one).
TEST_F(SpillExternal, TheReserveGivesWayToAnExternalHostHandle) {
  auto pool = make_pool(spill_config(64 * kMiB, 32 * kMiB, 0));
  ASSERT_CU(pool->fill_host_reserve(0, 32 * kMiB));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  const CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU(pool->create_external(&h, 16 * kMiB, &prop, 0))
      << " (32 MiB of host limit, all of it idle in the pool's reserve)";
  if (h != 0) {
    EXPECT_EQ(handle_tier(h), 'H');
    EXPECT_LE(pool->stats(0).host_chunks_reserve, 8u);
    release_external(*pool, h);
  }
  must_free(*pool, full);
}

// NCCL asks for exportable handles (POSIX file descriptors): past the budget it still gets memory.
TEST_F(SpillExternal, AnExportableRequestPastTheBudgetIsServed) {
  auto pool = make_pool(spill_config(64 * kMiB));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  CUmemAllocationProp prop = device_prop(0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(pool->create_external(&h, 8 * kMiB, &prop, 0));
  EXPECT_EQ(handle_tier(h), 'H');
  auto asked = pool->requested_properties(h);
  ASSERT_TRUE(asked.has_value());
  EXPECT_EQ(asked->requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_TRUE(usable(h, 8 * kMiB));
  release_external(*pool, h);
  must_free(*pool, full);
}

TEST_F(SpillExternal, OtherLocationsGoToTheDriverUnchanged) {
  auto pool = make_pool(spill_config(64 * kMiB));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(pool->create_external(&h, 16 * kMiB, &prop, 0));
  EXPECT_EQ(handle_tier(h), 'H');
  EXPECT_FALSE(pool->requested_properties(h).has_value());
  EXPECT_EQ(pool->stats(0).external_host_bytes, 0u) << "the program asked for host memory: not a spill";
  release_external(*pool, h);
}

TEST_F(SpillExternal, MemoryInfoWithReportHostAddsTheHostTier) {
  PoolConfig c = spill_config(64 * kMiB, 128 * kMiB);
  auto plain = make_pool(c);
  std::size_t free = 0, tot = 0;
  ASSERT_CU(plain->memory_info(&free, &tot));
  EXPECT_EQ(tot, 64 * kMiB) << "without report_host: the device budget only";
  EXPECT_EQ(free, room(64 * kMiB));
  plain.reset();
  c.report_host = true;
  auto pool = make_pool(c);
  ASSERT_CU(pool->memory_info(&free, &tot));
  EXPECT_EQ(tot, (64 + 128) * kMiB);
  EXPECT_EQ(free, room(64 * kMiB) + 128 * kMiB);
  // 100 MiB: all the device room and 19 host chunks. The reserve thread pins beside it; what it
  // holds counts as free (ready for spills, like idle device chunks), so once it is done free is
  // exactly the host limit less the 19 chunks. (Polled: a pin in flight is counted before it lands.)
  const std::size_t host = 50 - device_chunks(64 * kMiB);
  CUdeviceptr p = must_allocate(*pool, 100 * kMiB);
  const auto free_now = [&] {
    std::size_t f = 0, t = 0;
    EXPECT_CU(pool->memory_info(&f, &t));
    EXPECT_EQ(t, (64 + 128) * kMiB);
    return f;
  };
  EXPECT_TRUE(eventually([&] { return free_now() == 128 * kMiB - host * gran; }))
      << free_now() << " bytes free; want " << 128 * kMiB - host * gran;
  // What it reports free can be allocated.
  CUdeviceptr q = 0;
  free = free_now();
  EXPECT_CU(pool->allocate(&q, free));
  if (q != 0) must_free(*pool, q);
  // Freed, the mixed allocation is idle memory the pool hands out again: free, on both tiers.
  must_free(*pool, p);
  EXPECT_TRUE(eventually([&] { return free_now() == room(64 * kMiB) + 128 * kMiB; }))
      << free_now() << " bytes free after everything was freed; want " << room(64 * kMiB) + 128 * kMiB;
}

}  // namespace
}  // namespace pooltest
