// What the simulator's model and tiering rest on, asserted against either driver: the catalog
// kernels' parameter info from modules and libraries; that cuMemUnmap under a running kernel returns
// without waiting for it (so a mover must wait itself); that value waits release work once the host
// writes the flag; and whether mapping calls on other memory stall a running kernel. The figures
// (latencies, the stall) are printed as "FIDELITY_FIGURE name value" for docs/gpu-results.md.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "catalog_layouts.h"
#include "catalog_ptx.h"
#include "fidelity.h"
#include "sim/sim_control.h"

extern char** environ;

namespace fidelity {
namespace {

using Clock = std::chrono::steady_clock;

bool on_simulator() { return uvmpool::driver::real_symbol("uvmpool_sim_now_ns") != nullptr; }

// The catalog's image for the driver under test: the simulator's own, or the PTX of catalog.cu.
const char* catalog_image() { return on_simulator() ? UVMPOOL_SIM_MODULE_IMAGE : uvmpool::bench::kCatalogPtx; }

double wall_us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

void figure(const char* name, double value) {
  std::printf("FIDELITY_FIGURE %s %.1f\n", name, value);
  std::fflush(stdout);
}

class Kernels : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_CU(CU(cuModuleLoadData, &module, catalog_image()));
    ASSERT_CU(CU(cuModuleGetFunction, &touch, module, "uvmpool_touch"));
    ASSERT_CU(CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    if (stream != nullptr) CU(cuStreamDestroy_v2, stream);
    if (module != nullptr) CU(cuModuleUnload, module);
    DriverTest::TearDown();
  }
  // uvmpool_touch over [p, p + bytes), `passes` times, on the test's stream.
  CUresult launch_touch(CUdeviceptr p, std::uint64_t bytes, std::uint32_t passes) {
    std::uint32_t write = 0;
    void* args[] = {&p, &bytes, &passes, &write};
    return CU(cuLaunchKernel, touch, 264u, 1u, 1u, 512u, 1u, 1u, 0u, stream, args, nullptr);
  }
  // The duration of one launch_touch, by events (virtual on the simulator), in microseconds.
  double timed_touch(CUdeviceptr p, std::uint64_t bytes, std::uint32_t passes) {
    CUevent a = nullptr, b = nullptr;
    EXPECT_CU(CU(cuEventCreate, &a, 0));
    EXPECT_CU(CU(cuEventCreate, &b, 0));
    EXPECT_CU(CU(cuEventRecord, a, stream));
    EXPECT_CU(launch_touch(p, bytes, passes));
    EXPECT_CU(CU(cuEventRecord, b, stream));
    EXPECT_CU(CU(cuEventSynchronize, b));
    float ms = 0;
    EXPECT_CU(CU(cuEventElapsedTime_v2, &ms, a, b));
    CU(cuEventDestroy_v2, a);
    CU(cuEventDestroy_v2, b);
    return ms * 1000.0;
  }
  CUmodule module = nullptr;
  CUfunction touch = nullptr;
  CUstream stream = nullptr;
};

TEST_F(Kernels, ParamInfoOfModuleFunctionsAndLibraryKernelsIsTheCatalogsLayout) {
  CUlibrary library = nullptr;
  ASSERT_CU(CU(cuLibraryLoadData, &library, catalog_image(), nullptr, nullptr, 0u, nullptr, nullptr, 0u));
  for (const uvmpool::bench::CatalogLayout& l : uvmpool::bench::kCatalogLayouts) {
    SCOPED_TRACE(l.name);
    CUfunction f = nullptr;
    CUkernel k = nullptr;
    ASSERT_CU(CU(cuModuleGetFunction, &f, module, l.name));
    ASSERT_CU(CU(cuLibraryGetKernel, &k, library, l.name));
    for (std::size_t i = 0; i < l.params.size(); ++i) {
      std::size_t offset = 0, size = 0;
      ASSERT_CU(CU(cuFuncGetParamInfo, f, i, &offset, &size));
      EXPECT_EQ(offset, l.params[i].first);
      EXPECT_EQ(size, l.params[i].second);
      ASSERT_CU(CU(cuKernelGetParamInfo, k, i, &offset, &size));
      EXPECT_EQ(offset, l.params[i].first);
      EXPECT_EQ(size, l.params[i].second);
      // Measured (H200, driver 580): a CUkernel cast to a CUfunction is not answered here, though
      // launches take one; a launch hook must ask cuKernelGetParamInfo for CUkernel handles.
      EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, CU(cuFuncGetParamInfo, reinterpret_cast<CUfunction>(k), i, &offset, &size));
    }
    std::size_t offset = 0, size = 0;
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuFuncGetParamInfo, f, l.params.size(), &offset, &size));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuKernelGetParamInfo, k, l.params.size(), &offset, &size));
  }
  EXPECT_CU(CU(cuLibraryUnload, library));
}

// The body that runs in a child process (the context faults afterwards): a long kernel reads a VMM
// range; the range is unmapped while it runs. Prints how long the kernel takes and the unmap took.
TEST_F(Kernels, DISABLED_ChildUnmapsUnderItsOwnKernel) {
  constexpr std::size_t kBytes = 256 * kMiB;
  CUdeviceptr p = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&p, &h, kBytes));
  const double kernel_us = timed_touch(p, kBytes, 400);
  ASSERT_CU(launch_touch(p, kBytes, 400));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let it start
  const auto t0 = Clock::now();
  const CUresult r = CU(cuMemUnmap, p, kBytes);
  const double unmap_us = wall_us(t0, Clock::now());
  std::printf("CHILD kernel_us=%.1f unmap_us=%.1f unmap=%d\n", kernel_us, unmap_us, static_cast<int>(r));
  std::fflush(stdout);
  std::_Exit(0);  // the context may be faulted: no teardown
}

// Why a mover must fence its own unmaps: the driver does not wait for kernels using the range.
TEST_F(Kernels, UnmapUnderARunningKernelReturnsWithoutWaitingForIt) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=Kernels.DISABLED_ChildUnmapsUnderItsOwnKernel";
  char also[] = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), also, nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  double kernel_us = 0, unmap_us = 0;
  int unmap = -1;
  const std::size_t at = text.find("CHILD ");
  ASSERT_NE(at, std::string::npos) << text;
  ASSERT_EQ(std::sscanf(text.c_str() + at, "CHILD kernel_us=%lf unmap_us=%lf unmap=%d", &kernel_us, &unmap_us, &unmap), 3);
  figure("kernel_under_unmap_us", kernel_us);
  figure("unmap_under_kernel_us", unmap_us);
  EXPECT_EQ(unmap, CUDA_SUCCESS);
  // Measured (H200, driver 580, 2026-11-23): the unmap returned after 168 us; the kernel ran 23.6 ms.
  EXPECT_LT(unmap_us, kernel_us / 4) << "cuMemUnmap waited for the kernel";
}

// Why uvmpool holds a cuMemFree made during a graph capture in the allocation's context
// (src/pool/held_frees.h): NVIDIA's, in a relaxed capture, still waits for work queued before it on
// another stream, and the pool's own wait before an unmap (cuCtxSynchronize) is refused then.
TEST_F(Kernels, ARelaxedFreeDuringACaptureWaitsForWorkQueuedOnAnotherStream) {
  constexpr std::size_t kBytes = 64 * kMiB;
  CUdeviceptr busy = 0, freed = 0;
  ASSERT_CU(CU(cuMemAlloc_v2, &busy, kBytes));
  ASSERT_CU(CU(cuMemAlloc_v2, &freed, kMiB));
  CUevent done = nullptr;
  ASSERT_CU(CU(cuEventCreate, &done, static_cast<unsigned>(CU_EVENT_DISABLE_TIMING)));
  CUstream capturing = nullptr;
  ASSERT_CU(CU(cuStreamCreate, &capturing, static_cast<unsigned>(CU_STREAM_NON_BLOCKING)));
  ASSERT_CU(launch_touch(busy, kBytes, 400));  // 25.6 GB read: milliseconds on an H200
  ASSERT_CU(CU(cuEventRecord, done, stream));
  ASSERT_CU(CU(cuStreamBeginCapture_v2, capturing, CU_STREAM_CAPTURE_MODE_RELAXED));
  const CUresult before = CU(cuEventQuery, done);
  const auto t0 = Clock::now();
  const CUresult free_result = CU(cuMemFree_v2, freed);
  const double free_us = wall_us(t0, Clock::now());
  const CUresult after = CU(cuEventQuery, done);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_CU(CU(cuStreamIsCapturing, capturing, &status));
  CUgraph graph = nullptr;
  const CUresult ended = CU(cuStreamEndCapture, capturing, &graph);
  if (graph != nullptr) CU(cuGraphDestroy, graph);
  EXPECT_CU(CU(cuCtxSynchronize));
  EXPECT_CU(CU(cuStreamDestroy_v2, capturing));
  EXPECT_CU(CU(cuEventDestroy_v2, done));
  EXPECT_CU(CU(cuMemFree_v2, busy));
  ASSERT_CU_EQ(CUDA_ERROR_NOT_READY, before) << "the kernel ended before the free: the test shows nothing";
  EXPECT_CU(free_result) << "a relaxed capture allows the free";
  EXPECT_CU(after) << "the free returned while the other stream's kernel still ran";
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_CU(ended);
  figure("relaxed_capture_free_us", free_us);
}

TEST_F(Kernels, AValueWaitReleasesTheStreamSoonAfterTheHostWritesTheFlag) {
  void* host = nullptr;
  ASSERT_CU(host_alloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  auto* flag = static_cast<volatile std::uint32_t*>(host);
  *flag = 0;
  CUdeviceptr flag_device = 0;
  ASSERT_CU(CU(cuMemHostGetDevicePointer_v2, &flag_device, host, 0u));
  CUevent after = nullptr;
  ASSERT_CU(CU(cuEventCreate, &after, CU_EVENT_DISABLE_TIMING));
  double worst = 0, sum = 0;
  constexpr int kRounds = 20;
  for (int round = 1; round <= kRounds; ++round) {
    ASSERT_CU(CU(cuStreamWaitValue32_v2, stream, flag_device, static_cast<cuuint32_t>(round), CU_STREAM_WAIT_VALUE_GEQ));
    ASSERT_CU(CU(cuEventRecord, after, stream));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_CU_EQ(CUDA_ERROR_NOT_READY, CU(cuEventQuery, after));  // held by the wait
    const auto t0 = Clock::now();
    __atomic_store_n(const_cast<std::uint32_t*>(flag), static_cast<std::uint32_t>(round), __ATOMIC_RELEASE);
    CUresult r = CUDA_ERROR_NOT_READY;
    while ((r = CU(cuEventQuery, after)) == CUDA_ERROR_NOT_READY && wall_us(t0, Clock::now()) < 1e6) {
    }
    ASSERT_CU(r);
    const double us = wall_us(t0, Clock::now());
    worst = std::max(worst, us);
    sum += us;
  }
  // Measured (H200, driver 580, 2026-11-23): 6.9 us mean, 13.1 us worst, from the host's store to a query
  // seeing the event behind the wait complete (UVMPOOL_SIM_WAIT_VALUE_NS follows the mean).
  figure("wait_value_release_mean_us", sum / kRounds);
  figure("wait_value_release_worst_us", worst);
  // On the GPU the release is a hardware poll: within 1 ms. On the simulator a host thread notices the
  // store, and a loaded CI machine may not run it for milliseconds (2.9 ms seen under sanitizers on
  // 2 busy cores), so there the test asserts only that the wait is released at all (ASSERT_CU above,
  // within its 1 s loop).
  if (!on_simulator()) {
    EXPECT_LT(worst, 1000.0);
  }
  CU(cuEventDestroy_v2, after);
}

// Whether remapping other memory while a kernel runs slows the kernel (tiering remaps while the
// program computes). Measured (H200, driver 580, 2026-11-23): it does not (11829.5 us against 11823.0 us
// alone, with 32 map + access + unmap cycles of 44.8 us each during the kernel). Asserted only loosely,
// since it is a timing.
TEST_F(Kernels, MappingCallsOnOtherMemoryWhileAKernelRuns) {
  constexpr std::size_t kBytes = 256 * kMiB;
  CUdeviceptr p = 0, other = 0;
  CUmemGenericAllocationHandle h = 0, hb = 0;
  ASSERT_CU(vmm_device(&p, &h, kBytes));
  ASSERT_CU(address_reserve(&other, 2 * kMiB * 32));
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(mem_create(&hb, 2 * kMiB, prop));
  const double alone_us = timed_touch(p, kBytes, 200);
  CUevent a = nullptr, b = nullptr;
  ASSERT_CU(CU(cuEventCreate, &a, 0));
  ASSERT_CU(CU(cuEventCreate, &b, 0));
  ASSERT_CU(CU(cuEventRecord, a, stream));
  ASSERT_CU(launch_touch(p, kBytes, 200));
  ASSERT_CU(CU(cuEventRecord, b, stream));
  const CUmemAccessDesc rw = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  const auto t0 = Clock::now();
  int cycles = 0;
  for (; cycles < 32 && CU(cuEventQuery, b) == CUDA_ERROR_NOT_READY; ++cycles) {
    const CUdeviceptr at = other + 2 * kMiB * static_cast<std::size_t>(cycles);
    ASSERT_CU(CU(cuMemMap, at, 2 * kMiB, std::size_t{0}, hb, 0ull));
    ASSERT_CU(CU(cuMemSetAccess, at, 2 * kMiB, &rw, std::size_t{1}));
    ASSERT_CU(CU(cuMemUnmap, at, 2 * kMiB));
  }
  const double calls_us = wall_us(t0, Clock::now());
  ASSERT_CU(CU(cuEventSynchronize, b));
  float ms = 0;
  ASSERT_CU(CU(cuEventElapsedTime_v2, &ms, a, b));
  figure("kernel_alone_us", alone_us);
  figure("kernel_during_remaps_us", ms * 1000.0);
  figure("remap_cycles_during_kernel", cycles);
  figure("remap_cycle_us", cycles > 0 ? calls_us / cycles : 0);
  EXPECT_GT(cycles, 0);
  EXPECT_LT(ms * 1000.0, 10 * alone_us);
  CU(cuEventDestroy_v2, a);
  CU(cuEventDestroy_v2, b);
}

}  // namespace
}  // namespace fidelity
