// The one driver list and the tables generated from it: they agree, and cuGetProcAddress's rule
// picks the variant the real driver would.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "driver/driver_api.h"
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "tiering/streams.h"

namespace uvmpool::driver {
namespace {

int index_of(const char* symbol) { return find_symbol(symbol); }

TEST(DriverList, EverySymbolAppearsOnce) {
  for (std::size_t i = 0; i < kFunctionCount; ++i)
    EXPECT_EQ(find_symbol(kFunctions[i].symbol), static_cast<int>(i)) << kFunctions[i].symbol;
}

TEST(DriverList, VersionPicksTheNewestVariantNotAboveIt) {
  EXPECT_EQ(find_entry("cuMemAlloc", 3020, 0), index_of("cuMemAlloc_v2"));
  EXPECT_EQ(find_entry("cuMemAlloc", 13000, 0), index_of("cuMemAlloc_v2"));
  EXPECT_EQ(find_entry("cuMemAlloc", 3010, 0), -1);  // the 32-bit v1 ABI: not ours to answer
  EXPECT_EQ(find_entry("cuGetProcAddress", 11030, 0), index_of("cuGetProcAddress"));
  EXPECT_EQ(find_entry("cuGetProcAddress", 12000, 0), index_of("cuGetProcAddress_v2"));
  EXPECT_EQ(find_entry("cuCtxCreate", 11030, 0), index_of("cuCtxCreate_v2"));
  EXPECT_EQ(find_entry("cuCtxCreate", 11040, 0), index_of("cuCtxCreate_v3"));  // execution affinity
  EXPECT_EQ(find_entry("cuCtxCreate", 12040, 0), index_of("cuCtxCreate_v3"));
  EXPECT_EQ(find_entry("cuCtxCreate", 12050, 0), index_of("cuCtxCreate_v4"));
  EXPECT_EQ(find_entry("cuNoSuchFunction", 13000, 0), -1);
}

TEST(DriverList, PerThreadFlagPicksThePerThreadVariant) {
  const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(find_entry("cuMemAllocAsync", 12000, pt), index_of("cuMemAllocAsync_ptsz"));
  EXPECT_EQ(find_entry("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), index_of("cuMemAllocAsync"));
  EXPECT_EQ(find_entry("cuMemcpyHtoD", 12000, pt), index_of("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(find_entry("cuMemcpyHtoD", 12000, 0), index_of("cuMemcpyHtoD_v2"));
  // A function with no per-thread variant answers the same whatever the flag.
  EXPECT_EQ(find_entry("cuMemAlloc", 12000, pt), index_of("cuMemAlloc_v2"));
}

TEST(HookTable, HasAHookForExactlyTheHookEntries) {
  const Table& hooks = hooks::hook_table();
  for (std::size_t i = 0; i < kFunctionCount; ++i)
    EXPECT_EQ(hooks.raw()[i] != nullptr, kFunctions[i].kind == Kind::Hook) << kFunctions[i].symbol;
}

// Runs against the simulated driver (UVMPOOL_DRIVER_PATH set by CTest) or the real one on a GPU.
class RealDriverTable : public ::testing::Test {
 protected:
  void SetUp() override {
    if (real() == nullptr) GTEST_SKIP() << "no CUDA driver on this machine";
  }
};

TEST_F(RealDriverTable, DriverResolvesEveryListedSymbol) {
  for (std::size_t i = 0; i < kFunctionCount; ++i)
    EXPECT_NE(real()->table.raw()[i], nullptr) << kFunctions[i].symbol << " missing from " << real()->path;
}

TEST_F(RealDriverTable, DriverFileIsNeverThisProcessOwnFile) { EXPECT_NE(real()->path, own_path()); }

TEST_F(RealDriverTable, GetProcAddressHookHandsOutHooksOnlyForHookedFunctions) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_EQ(hooks::impl::cuGetProcAddress_v2("cuMemAlloc", &p, 12000, 0, &found), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(hooks::hook_table().cuMemAlloc_v2));
  ASSERT_EQ(hooks::impl::cuGetProcAddress_v2("cuMemAllocAsync", &p, 12000,
                                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found),
            CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(hooks::hook_table().cuMemAllocAsync_ptsz));
  ASSERT_EQ(hooks::impl::cuGetProcAddress_v2("cuGetProcAddress", &p, 12000, 0, &found), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(hooks::hook_table().cuGetProcAddress_v2));
  // Not hooked: the driver's own function, untouched.
  ASSERT_EQ(hooks::impl::cuGetProcAddress_v2("cuMemGetAllocationGranularity", &p, 12000, 0, &found), CUDA_SUCCESS);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(p, reinterpret_cast<void*>(real()->table.cuMemGetAllocationGranularity));
}

// Runs `call` on another thread while tiering's gate is closed (tiering/host_wait_gate.h: the mover
// holds the program's streams): it must wait outside the driver, and go once the gate opens.
void expect_waits_at_the_gate(const std::function<void()>& call) {
  tiering::HostWaitGate& gate = tiering::StreamRegistry::process().host_waits();
  ASSERT_TRUE(gate.close(std::chrono::milliseconds(1000)));
  const std::uint64_t waited = gate.waited();
  std::atomic<bool> returned{false};
  std::thread caller([&] {
    call();  // what the driver answers does not matter here
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned) << "the call went into the driver during a hold";
  gate.open();
  caller.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(gate.waited(), waited + 1);
}

// The copies that may wait on the host pass the gate.
TEST_F(RealDriverTable, CopyHooksWaitAtTheGateWhileTheMoverHolds) {
  expect_waits_at_the_gate([] { hooks::impl::cuMemcpyDtoH_v2(nullptr, 0, 0); });
}

// The strided, peer and batched copies pass it when they may wait on the host: when synchronous, or
// with a side that is (or, unified, may be) host memory; a batch always (its copies may be pageable).
// The descriptors are empty: what the driver answers does not matter here.
TEST_F(RealDriverTable, StridedPeerAndBatchCopiesWaitAtTheGateWhenTheyMayWaitOnTheHost) {
  expect_waits_at_the_gate([] {
    const CUDA_MEMCPY2D c{};
    hooks::impl::cuMemcpy2D_v2(&c);
  });
  expect_waits_at_the_gate([] {
    const CUDA_MEMCPY3D c{};
    hooks::impl::cuMemcpy3D_v2_ptds(&c);
  });
  expect_waits_at_the_gate([] {
    const CUDA_MEMCPY3D_PEER c{};
    hooks::impl::cuMemcpy3DPeer(&c);
  });
  expect_waits_at_the_gate([] { hooks::impl::cuMemcpyPeer(0, nullptr, 0, nullptr, 0); });
  expect_waits_at_the_gate([] {
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    hooks::impl::cuMemcpy2DAsync_v2(&c, nullptr);
  });
  expect_waits_at_the_gate([] { hooks::impl::cuMemcpyBatchAsync_v2(nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr); });
  expect_waits_at_the_gate([] { hooks::impl::cuMemcpy3DBatchAsync_v2_ptsz(0, nullptr, 0, nullptr); });
  expect_waits_at_the_gate([] { hooks::impl::cuMemcpy3DBatchAsync(0, nullptr, nullptr, 0, nullptr); });
}

// A null descriptor is refused before the driver, which crashes on one in cuMemcpy3DPeer (driver
// 580; the simulator crashes alike), and before the gate: such a call waits for nothing.
TEST_F(RealDriverTable, StridedCopiesRefuseANullDescriptorThemselves) {
  tiering::HostWaitGate& gate = tiering::StreamRegistry::process().host_waits();
  ASSERT_TRUE(gate.close(std::chrono::milliseconds(1000)));
  EXPECT_EQ(hooks::impl::cuMemcpy3DPeer(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemcpy3DPeer_ptds(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemcpy3DPeerAsync(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemcpy3DPeerAsync_ptsz(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemcpy2D_v2(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemcpy2DUnaligned_v2_ptds(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemcpy3DAsync_v2(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  gate.open();
}

// Device-to-device asynchronous copies and pitched memsets never waited on the host: they go through
// a closed gate.
TEST_F(RealDriverTable, AsynchronousDeviceCopiesAndPitchedMemsetsPassAClosedGate) {
  tiering::HostWaitGate& gate = tiering::StreamRegistry::process().host_waits();
  ASSERT_TRUE(gate.close(std::chrono::milliseconds(1000)));
  const std::uint64_t waited = gate.waited();
  std::atomic<int> returned{0};
  std::thread caller([&] {
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    hooks::impl::cuMemcpy2DAsync_v2(&c, nullptr);
    ++returned;
    hooks::impl::cuMemcpyPeerAsync(0, nullptr, 0, nullptr, 0, nullptr);
    ++returned;
    hooks::impl::cuMemsetD2D32Async(0, 0, 0, 0, 0, nullptr);
    ++returned;
  });
  for (int i = 0; i < 200 && returned < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(returned, 3) << "a call waited at the gate";
  gate.open();
  caller.join();
  EXPECT_EQ(gate.waited(), waited);
}

// So does a free of memory not the pool's: the driver's cuMemFree waits for the device.
TEST_F(RealDriverTable, AForeignFreeWaitsAtTheGateWhileTheMoverHolds) {
  expect_waits_at_the_gate([] { hooks::impl::cuMemFree_v2(0x1000); });
}

// The real driver (H200, 580.159.04) answers an unknown name with CUDA_SUCCESS, a null pointer and
// SYMBOL_NOT_FOUND; the hook must pass that on unchanged.
TEST_F(RealDriverTable, GetProcAddressHookKeepsTheDriversAnswerForUnknownNames) {
  void* p = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult found{};
  EXPECT_EQ(hooks::impl::cuGetProcAddress_v2("cuNoSuchFunction", &p, 12000, 0, &found), CUDA_SUCCESS);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

// The 11.3 form answers "not found" with CUDA_ERROR_NOT_FOUND; the hook must not turn it into the
// 12.0 form's CUDA_SUCCESS-with-null by asking the driver's other form.
TEST_F(RealDriverTable, GetProcAddressV1HookKeepsTheV1NotFoundAnswer) {
  void* p = nullptr;
  EXPECT_EQ(hooks::impl::cuGetProcAddress("cuNoSuchFunction", &p, 12000, 0), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(hooks::impl::cuGetProcAddress("cuMemAlloc", &p, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(hooks::hook_table().cuMemAlloc_v2));
}

TEST_F(RealDriverTable, GetProcAddressHookRejectsNullArgumentsWithoutCallingTheDriver) {
  void* p = nullptr;
  EXPECT_EQ(hooks::impl::cuGetProcAddress_v2(nullptr, &p, 12000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuGetProcAddress_v2("cuMemAlloc", nullptr, 12000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuGetProcAddress(nullptr, nullptr, 12000, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(RealDriverTable, AllocationHooksRejectMissingOutputPointers) {
  EXPECT_EQ(hooks::impl::cuMemAlloc_v2(nullptr, 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemAllocAsync_ptsz(nullptr, 4096, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemGetInfo_v2(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(hooks::impl::cuMemCreate(nullptr, 2 << 20, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr d = 0;
  EXPECT_EQ(hooks::impl::cuMemAllocFromPoolAsync(&d, 4096, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(RealDriverTable, DisabledGetProcAddressHandsOutTheDriversFunctions) {
  hooks::set_disabled(true);
  void* p = nullptr;
  CUdriverProcAddressQueryResult found{};
  const CUresult r = hooks::impl::cuGetProcAddress_v2("cuMemAlloc", &p, 12000, 0, &found);
  hooks::set_disabled(false);
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_NE(p, reinterpret_cast<void*>(hooks::hook_table().cuMemAlloc_v2));
}

TEST(LocateDriver, ConfiguredPathWins) { EXPECT_EQ(locate_driver("/opt/x/libcuda.so.1", ""), "/opt/x/libcuda.so.1"); }

// That the drop-in never picks its own file is shown by tests/hooks (hooks_dropin_*), where it matters.

}  // namespace
}  // namespace uvmpool::driver
