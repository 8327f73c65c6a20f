// The virtual clock: host costs of calls, times of kernels and copies per tier against the cost model
// (the round constants sim_test_main.cpp pins), the PCIe link and copy engines shared, ordering through
// events, host functions and value waits, and determinism.
#include <atomic>
#include <thread>
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

using Clock = KernelTest;

constexpr std::size_t kBytes = 8 * kMiB;

struct Timed {
  CUevent start = nullptr, stop = nullptr;
  Timed() {
    EXPECT_CU(cuEventCreate(&start, 0));
    EXPECT_CU(cuEventCreate(&stop, 0));
  }
};

// The virtual duration of `work` on `stream`, between two events around it, once the host caught up. It
// includes the submitting call's host cost: work cannot start before it is submitted.
template <typename Work>
std::uint64_t time_on(CUstream stream, Work&& work) {
  Timed t;
  EXPECT_CU(cuEventRecord(t.start, stream));
  work();
  EXPECT_CU(cuEventRecord(t.stop, stream));
  EXPECT_CU(cuEventSynchronize(t.stop));
  return elapsed_ns(t.start, t.stop);
}

CUdeviceptr host_vmm(std::size_t bytes) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU(make_vmm(bytes, pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0), &va, &h));
  return va;
}

TEST_F(Clock, CallsAdvanceTheHostClockByTheirCost) {
  CUevent e = nullptr;
  ASSERT_CU(cuEventCreate(&e, 0));
  const std::uint64_t t0 = uvmpool_sim_now_ns();
  ASSERT_CU(cuEventRecord(e, nullptr));
  EXPECT_EQ(uvmpool_sim_now_ns() - t0, kCallNs);
  uvmpool_sim_advance_host_ns(12345);
  EXPECT_EQ(uvmpool_sim_now_ns() - t0, kCallNs + 12345);
  int value = 0;
  ASSERT_CU(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 0));
  EXPECT_EQ(value, 3);
  EXPECT_EQ(uvmpool_sim_now_ns() - t0, kCallNs + 12345);  // a query costs nothing
  const std::uint64_t t1 = uvmpool_sim_now_ns();
  ASSERT_CU(launch(kernel("uvmpool_touch"), nullptr, CUdeviceptr{0}, std::uint64_t{0}, 1u, 0u));
  EXPECT_EQ(uvmpool_sim_now_ns() - t1, kLaunchNs);
}

// Measured on an H200 (docs/tiering.md): a device mapping's cuMemSetAccess, cuMemUnmap and
// cuMemRelease cost the same at 2 and 32 MiB; a host-located one's grow with its bytes.
TEST_F(Clock, HostMappingsCostByTheirBytesDeviceMappingsDoNot) {
  constexpr std::uint64_t kGib = std::uint64_t{1} << 30;
  for (const bool host : {false, true}) {
    for (const std::size_t bytes : {2 * kMiB, 32 * kMiB}) {
      SCOPED_TRACE(std::string(host ? "host " : "device ") + std::to_string(bytes / kMiB) + " MiB");
      const CUmemAllocationProp prop = host ? pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0)
                                            : pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
      CUdeviceptr va = 0;
      CUmemGenericAllocationHandle h = 0;
      ASSERT_CU(cuMemAddressReserve(&va, bytes, 0, 0, 0));
      ASSERT_CU(cuMemCreate(&h, bytes, &prop, 0));
      ASSERT_CU(cuMemMap(va, bytes, 0, h, 0));
      const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
      std::uint64_t t = uvmpool_sim_now_ns();
      ASSERT_CU(cuMemSetAccess(va, bytes, &rw, 1));
      EXPECT_EQ(uvmpool_sim_now_ns() - t, host ? kSetAccessHostNs + bytes * kSetAccessHostNsPerGib / kGib : kSetAccessDeviceNs);
      t = uvmpool_sim_now_ns();
      ASSERT_CU(cuMemUnmap(va, bytes));
      EXPECT_EQ(uvmpool_sim_now_ns() - t, host ? kUnmapHostNs + bytes * kUnmapHostNsPerGib / kGib : kUnmapDeviceNs);
      t = uvmpool_sim_now_ns();
      ASSERT_CU(cuMemRelease(h));
      EXPECT_EQ(uvmpool_sim_now_ns() - t, host ? kReleaseHostNs + bytes * kReleaseHostNsPerGib / kGib : kReleaseDeviceNs);
      ASSERT_CU(cuMemAddressFree(va, bytes));
    }
  }
}

TEST_F(Clock, EachFunctionsTallyHoldsTheModeledTimeOfItsCallsWaitsIncluded) {
  // What UVMPOOL_SIM_PROFILE writes at exit and uvmpool_sim_call_ns reads: the host clock's advance
  // across each call, by function, since the last reset.
  uvmpool_sim_reset_counts();
  EXPECT_EQ(uvmpool_sim_call_ns("cuMemSetAccess"), 0u);
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h[2] = {};
  ASSERT_CU(cuMemAddressReserve(&va, 4 * kMiB, 0, 0, 0));
  for (int i = 0; i < 2; ++i) {
    ASSERT_CU(cuMemCreate(&h[i], 2 * kMiB, &prop, 0));
    ASSERT_CU(cuMemMap(va + i * 2 * kMiB, 2 * kMiB, 0, h[i], 0));
  }
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  const std::uint64_t t = uvmpool_sim_now_ns();
  ASSERT_CU(cuMemSetAccess(va, 4 * kMiB, &rw, 1));  // one call over two mappings: charged for each
  const std::uint64_t set_access = uvmpool_sim_now_ns() - t;
  EXPECT_GE(set_access, 2 * kSetAccessDeviceNs);
  EXPECT_EQ(uvmpool_sim_call_ns("cuMemSetAccess"), set_access);
  EXPECT_EQ(uvmpool_sim_call_count("cuMemSetAccess"), 1u);
  // A synchronize's tally is its wait for the kernel; a base name sums its variants.
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(launch(kernel("uvmpool_touch"), s, va, std::uint64_t{4 * kMiB}, 100u, 0u));
  const std::uint64_t before_sync = uvmpool_sim_now_ns();
  ASSERT_CU(cuStreamSynchronize(s));
  const std::uint64_t waited = uvmpool_sim_now_ns() - before_sync;
  EXPECT_GT(waited, at(100 * 4 * kMiB, kHbmRead));
  EXPECT_EQ(uvmpool_sim_call_ns("cuStreamSynchronize"), waited);
  EXPECT_EQ(uvmpool_sim_call_ns("cuLaunchKernel"), kLaunchNs);
  EXPECT_EQ(uvmpool_sim_call_ns("cuNoSuchFunction"), 0u);
  uvmpool_sim_reset_counts();
  EXPECT_EQ(uvmpool_sim_call_ns("cuMemSetAccess"), 0u);
  EXPECT_EQ(uvmpool_sim_call_ns("cuStreamSynchronize"), 0u);
  // Another thread's wait moves this thread's clock to the kernel's end at its next call: that jump
  // is charged to no call of this thread (a mover's cuMemUnmap is not charged for the program's
  // wait; clock::spent counts a thread's own charges and waits only, which also covers a jump that
  // comes while a call runs, as the tiering replays' threads showed: cuMemMap 343 us a call, 1.2).
  CUcontext context = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&context));
  ASSERT_CU(launch(kernel("uvmpool_touch"), s, va, std::uint64_t{4 * kMiB}, 1000u, 0u));
  const std::uint64_t before = uvmpool_sim_now_ns();
  std::thread waiter([&] {
    EXPECT_CU(cuCtxSetCurrent(context));
    EXPECT_CU(cuStreamSynchronize(s));
  });
  waiter.join();
  ASSERT_CU(cuMemUnmap(va, 4 * kMiB));  // two mappings removed
  EXPECT_GT(uvmpool_sim_now_ns() - before, at(1000 * 4 * kMiB, kHbmRead));  // the jump, then the unmaps
  EXPECT_EQ(uvmpool_sim_call_ns("cuMemUnmap"), 2 * kUnmapDeviceNs);
  EXPECT_GT(uvmpool_sim_call_ns("cuStreamSynchronize"), at(1000 * 4 * kMiB, kHbmRead));
  for (CUmemGenericAllocationHandle one : h) ASSERT_CU(cuMemRelease(one));
  ASSERT_CU(cuMemAddressFree(va, 4 * kMiB));
}

TEST_F(Clock, KernelsTakeTheirLatencyPlusTheirBytesAtEachTiersRate) {
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, kBytes));
  const CUdeviceptr host = host_vmm(kBytes);
  CUfunction touch = kernel("uvmpool_touch");
  // The link's counts are since load: earlier tests in this process carried bytes too.
  const auto in_before = uvmpool_sim_link_bytes(0, UVMPOOL_SIM_HOST_TO_DEVICE);
  const auto out_before = uvmpool_sim_link_bytes(0, UVMPOOL_SIM_DEVICE_TO_HOST);
  auto touch_time = [&](CUdeviceptr p, std::uint32_t passes, std::uint32_t write) {
    return time_on(nullptr, [&] { ASSERT_CU(launch(touch, nullptr, p, std::uint64_t{kBytes}, passes, write)); });
  };
  EXPECT_NEAR(touch_time(device, 1, 0), kLaunchNs + kKernelNs + at(kBytes, kHbmRead), 2);
  EXPECT_NEAR(touch_time(device, 3, 0), kLaunchNs + kKernelNs + at(3 * kBytes, kHbmRead), 2);
  EXPECT_NEAR(touch_time(device, 1, 1), kLaunchNs + kKernelNs + at(kBytes, kHbmWrite), 2);
  EXPECT_NEAR(touch_time(host, 1, 0), kLaunchNs + kKernelNs + at(kBytes, kHostRead), 2);
  EXPECT_NEAR(touch_time(host, 1, 1), kLaunchNs + kKernelNs + at(kBytes, kHostWrite), 2);
  EXPECT_EQ(uvmpool_sim_link_bytes(0, UVMPOOL_SIM_HOST_TO_DEVICE) - in_before, kBytes);
  EXPECT_EQ(uvmpool_sim_link_bytes(0, UVMPOOL_SIM_DEVICE_TO_HOST) - out_before, kBytes);
}

// The modeled time of a cuMemSetAccess giving device 0 read-write access to [va, va + bytes).
std::uint64_t device_access_ns(CUdeviceptr va, std::size_t bytes) {
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  const std::uint64_t t = uvmpool_sim_now_ns();
  EXPECT_CU(cuMemSetAccess(va, bytes, &rw, 1));
  return uvmpool_sim_now_ns() - t;
}

// On an H200 a cuMemSetAccess made while copies run on its device's copy engines took about 1 ms
// against 24 us alone (tests/gpu/remap_under_load.py --calls): modeled as the rest of the copies, up to
// UVMPOOL_SIM_SET_ACCESS_BESIDE_COPY_NS, once a mapping. Kernels do not delay it.
TEST_F(Clock, ASetAccessWaitsForCopiesRunningOnItsDeviceUpToTheCap) {
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  CUdeviceptr va = 0, a = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAddressReserve(&va, 2 * kMiB, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&h, 2 * kMiB, &prop, 0));
  ASSERT_CU(cuMemMap(va, 2 * kMiB, 0, h, 0));
  ASSERT_CU(cuMemAlloc(&a, kBytes));
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kBytes, 0));
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const auto set_access_time = [&] { return device_access_ns(va, 2 * kMiB); };
  EXPECT_EQ(set_access_time(), kSetAccessDeviceNs) << "nothing copying";
  // A copy of 8 MiB at 40 GB/s runs about 210 us: a call made at its start waits the cap.
  ASSERT_CU(cuMemcpyHtoDAsync(a, pinned, kBytes, s));
  EXPECT_EQ(set_access_time(), kSetAccessDeviceNs + kSetAccessBesideCopyNs);
  // The next, made after that wait, only for the rest of the copy.
  const std::uint64_t waited = set_access_time() - kSetAccessDeviceNs;
  EXPECT_GT(waited, 0u);
  EXPECT_LT(waited, kSetAccessBesideCopyNs);
  EXPECT_EQ(set_access_time(), kSetAccessDeviceNs) << "the copy is over";
  // A kernel running on the device does not delay it.
  ASSERT_CU(launch(kernel("uvmpool_touch"), s, a, std::uint64_t{kBytes}, 1000u, 0u));
  EXPECT_EQ(set_access_time(), kSetAccessDeviceNs);
  ASSERT_CU(cuStreamSynchronize(s));
  ASSERT_CU(cuMemUnmap(va, 2 * kMiB));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(va, 2 * kMiB));
}

// One call over several mappings waits once for each of them (H200: 16 device mappings of 32 MiB in
// one call, 17 ms beside copies; tests/gpu/remap_under_load.py --span), each wait only for what is
// left of the copies by then.
TEST_F(Clock, ASetAccessOverSeveralMappingsWaitsOnceForEach) {
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  CUdeviceptr va = 0, a = 0;
  CUmemGenericAllocationHandle h[2] = {};
  ASSERT_CU(cuMemAddressReserve(&va, 4 * kMiB, 0, 0, 0));
  for (int i = 0; i < 2; ++i) {
    ASSERT_CU(cuMemCreate(&h[i], 2 * kMiB, &prop, 0));
    ASSERT_CU(cuMemMap(va + i * 2 * kMiB, 2 * kMiB, 0, h[i], 0));
  }
  ASSERT_CU(cuMemAlloc(&a, 4 * kBytes));
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, 4 * kBytes, 0));
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const auto both_time = [&] { return device_access_ns(va, 4 * kMiB); };
  EXPECT_EQ(both_time(), 2 * kSetAccessDeviceNs) << "nothing copying";
  ASSERT_CU(cuMemcpyHtoDAsync(a, pinned, 4 * kBytes, s));  // about 840 us: longer than a few calls' waits
  EXPECT_EQ(both_time(), 2 * kSetAccessDeviceNs + 2 * kSetAccessBesideCopyNs) << "a full wait for each mapping";
  // The calls after it wait in full until the copy ends during one of them, which waits for the rest.
  std::uint64_t t = 0;
  int calls = 0;
  while ((t = both_time()) == 2 * kSetAccessDeviceNs + 2 * kSetAccessBesideCopyNs && ++calls < 20) {
  }
  EXPECT_LT(calls, 20) << "the copy never ended";
  EXPECT_GE(t, 2 * kSetAccessDeviceNs);
  EXPECT_LT(t, 2 * kSetAccessDeviceNs + 2 * kSetAccessBesideCopyNs);
  EXPECT_EQ(both_time(), 2 * kSetAccessDeviceNs) << "the copy is over";
  ASSERT_CU(cuStreamSynchronize(s));
  for (int i = 0; i < 2; ++i) {
    ASSERT_CU(cuMemUnmap(va + i * 2 * kMiB, 2 * kMiB));
    ASSERT_CU(cuMemRelease(h[i]));
  }
  ASSERT_CU(cuMemAddressFree(va, 4 * kMiB));
}

TEST_F(Clock, CopiesTakeTheirBytesAtThePathsRate) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, kBytes));
  ASSERT_CU(cuMemAlloc(&b, kBytes));
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kBytes, 0));
  std::vector<char> pageable(kBytes);
  const CUdeviceptr host = host_vmm(kBytes);
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemcpyHtoDAsync(a, pinned, kBytes, s)); }), kCallNs + kCopyNs + at(kBytes, kCopy), 2);
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemcpyDtoHAsync(pinned, a, kBytes, s)); }), kCallNs + kCopyNs + at(kBytes, kCopy), 2);
  // From pageable memory the copy is synchronous, as on a GPU: the stop event is recorded a call after
  // it ended.
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemcpyHtoDAsync(a, pageable.data(), kBytes, s)); }),
              kCallNs + kCopyNs + at(kBytes, kPageable) + kCallNs, 2);
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemcpyDtoDAsync(b, a, kBytes, s)); }),
              kCallNs + kCopyNs + at(kBytes, kHbmRead) + at(kBytes, kHbmWrite), 2);
  // Between a host-located VMM range and device memory, the copy engine's rate, either way.
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemcpyAsync(a, host, kBytes, s)); }), kCallNs + kCopyNs + at(kBytes, kCopy), 2);
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemcpyAsync(host, a, kBytes, s)); }), kCallNs + kCopyNs + at(kBytes, kCopy), 2);
  // A memset is device work at the write rate of its tier.
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemsetD8Async(a, 1, kBytes, s)); }), kCallNs + kCopyNs + at(kBytes, kHbmWrite), 2);
  EXPECT_NEAR(time_on(s, [&] { ASSERT_CU(cuMemsetD8Async(host, 1, kBytes, s)); }), kCallNs + kCopyNs + at(kBytes, kHostWrite), 2);
}

// The synchronous forms return when the copy has ended: the host clock moves past it.
TEST_F(Clock, SynchronousCopiesMoveTheHostClockToTheirEnd) {
  CUdeviceptr a = 0;
  ASSERT_CU(cuMemAlloc(&a, kBytes));
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kBytes, 0));
  const std::uint64_t t0 = uvmpool_sim_now_ns();
  ASSERT_CU(cuMemcpyHtoD(a, pinned, kBytes));
  EXPECT_EQ(uvmpool_sim_now_ns() - t0, kCallNs + kCopyNs + at(kBytes, kCopy));
}

TEST_F(Clock, CopiesInOneDirectionShareTheLinkAndOppositeDirectionsDoNot) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, kBytes));
  ASSERT_CU(cuMemAlloc(&b, kBytes));
  void* in = nullptr;
  void* out = nullptr;
  ASSERT_CU(cuMemHostAlloc(&in, kBytes, 0));
  ASSERT_CU(cuMemHostAlloc(&out, kBytes, 0));
  CUstream s1 = nullptr, s2 = nullptr;
  ASSERT_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  const std::uint64_t one = at(kBytes, kCopy);
  Timed t1, t2;
  // Two copies in, on two streams: the second waits for the link.
  ASSERT_CU(cuEventRecord(t1.start, s1));
  ASSERT_CU(cuMemcpyHtoDAsync(a, in, kBytes, s1));
  ASSERT_CU(cuMemcpyHtoDAsync(b, in, kBytes, s2));
  ASSERT_CU(cuEventRecord(t2.stop, s2));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_NEAR(elapsed_ns(t1.start, t2.stop), kCopyNs + 2 * one, kCallNs + 2);
  // One in, one out: side by side.
  Timed t3, t4;
  ASSERT_CU(cuEventRecord(t3.start, s1));
  ASSERT_CU(cuMemcpyHtoDAsync(a, in, kBytes, s1));
  ASSERT_CU(cuMemcpyDtoHAsync(out, b, kBytes, s2));
  ASSERT_CU(cuEventRecord(t4.stop, s2));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_NEAR(elapsed_ns(t3.start, t4.stop), kCopyNs + one, 2 * kCallNs + 2);
  // A kernel reading host memory in place shares the link with a copy in.
  const CUdeviceptr host = host_vmm(kBytes);
  Timed t5, t6;
  ASSERT_CU(cuEventRecord(t5.start, s1));
  ASSERT_CU(cuMemcpyHtoDAsync(a, in, kBytes, s1));
  ASSERT_CU(launch(kernel("uvmpool_touch"), s2, host, std::uint64_t{kBytes}, 1u, 0u));
  ASSERT_CU(cuEventRecord(t6.stop, s2));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_GE(elapsed_ns(t5.start, t6.stop), kCopyNs + one + at(kBytes, kHostRead));
}

TEST_F(Clock, FourCopiesOnFourStreamsWaitForOneOfThreeEngines) {
  constexpr int kStreams = 4;
  CUdeviceptr src = 0, dst[kStreams] = {};
  ASSERT_CU(cuMemAlloc(&src, kBytes));
  CUstream s[kStreams] = {};
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_CU(cuMemAlloc(&dst[i], kBytes));
    ASSERT_CU(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
  }
  Timed t;
  ASSERT_CU(cuEventRecord(t.start, s[0]));
  for (int i = 0; i < kStreams; ++i) ASSERT_CU(cuMemcpyDtoDAsync(dst[i], src, kBytes, s[i]));
  ASSERT_CU(cuEventRecord(t.stop, s[kStreams - 1]));
  ASSERT_CU(cuCtxSynchronize());
  const std::uint64_t one = kCopyNs + at(kBytes, kHbmRead) + at(kBytes, kHbmWrite);
  EXPECT_NEAR(elapsed_ns(t.start, t.stop), 2 * one, 4 * kCallNs);
}

TEST_F(Clock, QueriesAnswerByVirtualTimeAndSynchronizeCatchesUp) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kBytes));
  CUstream s = nullptr;
  CUevent done = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuEventCreate(&done, 0));
  const std::uint64_t t0 = uvmpool_sim_now_ns();
  ASSERT_CU(launch(kernel("uvmpool_touch"), s, p, std::uint64_t{kBytes}, 100u, 0u));
  ASSERT_CU(cuEventRecord(done, s));
  const std::uint64_t duration = kKernelNs + at(100 * kBytes, kHbmRead);
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuEventQuery(done));
  uvmpool_sim_advance_host_ns(duration);
  EXPECT_CU(cuStreamQuery(s));
  EXPECT_CU(cuEventQuery(done));
  ASSERT_CU(launch(kernel("uvmpool_touch"), s, p, std::uint64_t{kBytes}, 100u, 0u));
  const std::uint64_t t1 = uvmpool_sim_now_ns();
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(uvmpool_sim_now_ns(), t1 + duration);
  EXPECT_GT(t1, t0);
}

TEST_F(Clock, AStreamWaitingForAnEventStartsAfterTheWorkBeforeIt) {
  CUdeviceptr p = 0, q = 0;
  ASSERT_CU(cuMemAlloc(&p, kBytes));
  ASSERT_CU(cuMemAlloc(&q, kBytes));
  CUstream a = nullptr, b = nullptr;
  ASSERT_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUevent after_a = nullptr;
  ASSERT_CU(cuEventCreate(&after_a, 0));
  Timed t;
  CUfunction touch = kernel("uvmpool_touch");
  ASSERT_CU(cuEventRecord(t.start, a));
  ASSERT_CU(launch(touch, a, p, std::uint64_t{kBytes}, 10u, 0u));
  ASSERT_CU(cuEventRecord(after_a, a));
  ASSERT_CU(cuStreamWaitEvent(b, after_a, 0));
  ASSERT_CU(launch(touch, b, q, std::uint64_t{kBytes}, 10u, 0u));
  ASSERT_CU(cuEventRecord(t.stop, b));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_NEAR(elapsed_ns(t.start, t.stop), 2 * (kKernelNs + at(10 * kBytes, kHbmRead)), kLaunchNs + 2);
}

TEST_F(Clock, TheLegacyStreamWaitsForBlockingStreamsButNotForNonBlockingOnes) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kBytes));
  CUstream blocking = nullptr, non_blocking = nullptr;
  ASSERT_CU(cuStreamCreate(&blocking, 0));
  ASSERT_CU(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING));
  CUfunction touch = kernel("uvmpool_touch");
  const std::uint64_t long_kernel = kKernelNs + at(100 * kBytes, kHbmRead);
  ASSERT_CU(launch(touch, non_blocking, p, std::uint64_t{kBytes}, 100u, 0u));
  std::uint64_t t0 = uvmpool_sim_now_ns();
  ASSERT_CU(cuStreamSynchronize(nullptr));
  EXPECT_LT(uvmpool_sim_now_ns() - t0, long_kernel);
  ASSERT_CU(launch(touch, blocking, p, std::uint64_t{kBytes}, 100u, 0u));
  t0 = uvmpool_sim_now_ns();
  ASSERT_CU(cuStreamSynchronize(nullptr));
  EXPECT_GE(uvmpool_sim_now_ns() - t0, long_kernel - kLaunchNs);
}

struct Flag {
  std::uint32_t* host = nullptr;
  CUdeviceptr device = 0;
  Flag() {
    void* p = nullptr;
    EXPECT_CU(cuMemHostAlloc(&p, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    host = static_cast<std::uint32_t*>(p);
    *host = 0;
    EXPECT_CU(cuMemHostGetDevicePointer(&device, p, 0));
  }
};

TEST_F(Clock, WorkBehindAValueWaitRunsOnlyOnceTheHostWritesTheValue) {
  Flag flag;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  ASSERT_CU(cuMemsetD32(p, 0, 16));
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  Timed t;
  ASSERT_CU(cuEventRecord(t.start, s));
  const std::uint64_t recorded = uvmpool_sim_now_ns();
  ASSERT_CU(cuStreamWaitValue32(s, flag.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), s, p, std::uint64_t{16}, 42u));
  ASSERT_CU(cuEventRecord(t.stop, s));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
  std::uint32_t first = 1;
  ASSERT_CU(cuMemcpyDtoH(&first, p, 4));
  EXPECT_EQ(first, 0u);  // the kernel has not run
  uvmpool_sim_advance_host_ns(50000);
  const std::uint64_t written = uvmpool_sim_now_ns();
  __atomic_store_n(flag.host, 1u, __ATOMIC_RELEASE);
  ASSERT_CU(cuStreamSynchronize(s));  // the first call after the write finds it
  ASSERT_CU(cuMemcpyDtoH(&first, p, 4));
  EXPECT_EQ(first, 42u);
  // Released by that call: the wait's delay, then the kernel.
  EXPECT_NEAR(elapsed_ns(t.start, t.stop), written + kCallNs + kWaitValueNs + kKernelNs - recorded, 2);
  EXPECT_EQ(uvmpool_sim_violations(), 0u);
}

TEST_F(Clock, AValueWrittenByAnotherStreamReleasesTheWaitAtThatWritesTime) {
  Flag flag;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kBytes));
  CUstream writer = nullptr, waiter = nullptr;
  ASSERT_CU(cuStreamCreate(&writer, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING));
  // Loaded first: under lazy loading a kernel's first launch waits for the other streams, the waiter
  // too, which waits for what the writer does after that launch (as on a GPU).
  ASSERT_CU(launch(kernel("uvmpool_touch"), writer, p, std::uint64_t{0}, 1u, 0u));
  ASSERT_CU(cuStreamSynchronize(writer));
  Timed t;
  ASSERT_CU(cuEventRecord(t.start, writer));
  ASSERT_CU(cuStreamWaitValue32(waiter, flag.device, 7, CU_STREAM_WAIT_VALUE_EQ));
  ASSERT_CU(cuEventRecord(t.stop, waiter));
  ASSERT_CU(launch(kernel("uvmpool_touch"), writer, p, std::uint64_t{kBytes}, 10u, 0u));
  ASSERT_CU(cuStreamWriteValue32(writer, flag.device, 7, 0));
  ASSERT_CU(cuStreamSynchronize(waiter));
  EXPECT_EQ(*flag.host, 7u);
  EXPECT_NEAR(elapsed_ns(t.start, t.stop), kLaunchNs + kKernelNs + at(10 * kBytes, kHbmRead) + kWaitValueNs,
              2 * kCallNs + 2);
}

TEST_F(Clock, HostFunctionsRunInStreamOrderAndTakeTheirTime) {
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  static std::vector<int> order;
  order.clear();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  const std::uint64_t t = time_on(s, [&] {
    ASSERT_CU(cuLaunchHostFunc(s, [](void*) { order.push_back(1); }, nullptr));
    ASSERT_CU(cuLaunchHostFunc(s, [](void*) { order.push_back(2); }, nullptr));
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_NEAR(t, 2 * kHostFuncNs, 2 * kCallNs + 2);
}

TEST_F(Clock, AHostFunctionThatWritesAValueReleasesWorkWaitingForIt) {
  Flag flag;
  CUstream a = nullptr, b = nullptr;
  ASSERT_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamWaitValue32(b, flag.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(b));
  ASSERT_CU(cuLaunchHostFunc(a, [](void* f) { __atomic_store_n(static_cast<std::uint32_t*>(f), 1u, __ATOMIC_RELEASE); },
                             flag.host));
  EXPECT_CU(cuStreamSynchronize(b));
}

TEST_F(Clock, ASynchronizeThatCouldNeverFinishIsAnErrorNotAHang) {
  Flag flag;
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamWaitValue32(s, flag.device, 1, CU_STREAM_WAIT_VALUE_EQ));
  EXPECT_CU_EQ(CUDA_ERROR_LAUNCH_TIMEOUT, cuStreamSynchronize(s));
  EXPECT_CU_EQ(CUDA_ERROR_LAUNCH_TIMEOUT, cuCtxSynchronize());
  *flag.host = 1;
  EXPECT_CU(cuStreamSynchronize(s));
}

TEST_F(Clock, AnotherThreadWritingTheValueReleasesASynchronize) {
  Flag flag;
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamWaitValue32(s, flag.device, 1, CU_STREAM_WAIT_VALUE_EQ));
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    __atomic_store_n(flag.host, 1u, __ATOMIC_RELEASE);
  });
  EXPECT_CU(cuStreamSynchronize(s));
  writer.join();
}

// A writer that writes at once and ends: it may be gone by the time the synchronize asks whether any
// other thread could still write, with its value already written. Many times, since the window is
// short (the old order failed this under ASan in CI, once, as the 20 ms writer above).
TEST_F(Clock, AThreadThatWritesTheValueAndEndsAtOnceReleasesASynchronize) {
  Flag flag;
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (std::uint32_t i = 1; i <= 300; ++i) {
    ASSERT_CU(cuStreamWaitValue32(s, flag.device, i, CU_STREAM_WAIT_VALUE_EQ));
    std::thread writer([&] { __atomic_store_n(flag.host, i, __ATOMIC_RELEASE); });
    const CUresult r = cuStreamSynchronize(s);
    writer.join();
    ASSERT_CU(r) << "round " << i;
  }
}

// The same sequence, run twice from a reset clock, gives the same virtual times.
TEST_F(Clock, TheSameSequenceGivesTheSameTimes) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kBytes));
  const CUdeviceptr host = host_vmm(kBytes);
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kBytes, 0));
  CUfunction touch = kernel("uvmpool_touch");
  auto run = [&] {
    uvmpool_sim_reset_clock();
    std::vector<std::uint64_t> times;
    CUstream a = nullptr, b = nullptr;
    EXPECT_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(cuStreamCreate(&b, 0));
    for (int i = 0; i < 5; ++i) {
      EXPECT_CU(launch(touch, a, p, std::uint64_t{kBytes}, 2u, 0u));
      EXPECT_CU(cuMemcpyHtoDAsync(p, pinned, kBytes / 2, b));
      EXPECT_CU(launch(touch, b, host, std::uint64_t{kBytes}, 1u, 1u));
      times.push_back(uvmpool_sim_now_ns());
    }
    EXPECT_CU(cuCtxSynchronize());
    times.push_back(uvmpool_sim_now_ns());
    times.push_back(uvmpool_sim_link_bytes(0, UVMPOOL_SIM_HOST_TO_DEVICE));
    EXPECT_CU(cuStreamDestroy(a));
    EXPECT_CU(cuStreamDestroy(b));
    return times;
  };
  const auto first = run();
  EXPECT_EQ(first, run());
  EXPECT_GT(first.back(), 0u);
}

}  // namespace
}  // namespace simtest
