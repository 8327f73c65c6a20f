#include "pool_test.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>

namespace pooltest {
namespace {

struct Session {
  const Table* table = nullptr;
  Sim sim;
  std::string failure;  // why every test fails
  std::vector<CUcontext> contexts;
  std::size_t gran = 0;
};

Session open_session() {
  Session s;
  const auto* real = uvmpool::driver::real();
  if (real == nullptr) {
    s.failure = "no driver could be opened: set UVMPOOL_DRIVER_PATH to <build>/sim/libcuda.so.1";
    return s;
  }
  s.table = &real->table;
  auto sym = [&](const char* name) { return dlsym(real->handle, name); };
  s.sim.fail = reinterpret_cast<decltype(s.sim.fail)>(sym("uvmpool_sim_fail"));
  s.sim.call_count = reinterpret_cast<decltype(s.sim.call_count)>(sym("uvmpool_sim_call_count"));
  s.sim.reset_counts = reinterpret_cast<decltype(s.sim.reset_counts)>(sym("uvmpool_sim_reset_counts"));
  s.sim.clear_failures = reinterpret_cast<decltype(s.sim.clear_failures)>(sym("uvmpool_sim_clear_failures"));
  s.sim.hold_stream = sym("uvmpool_sim_hold_stream");
  s.sim.set_capture_status = sym("uvmpool_sim_set_capture_status");
  if (s.sim.fail == nullptr || s.sim.call_count == nullptr || s.sim.reset_counts == nullptr ||
      s.sim.clear_failures == nullptr) {
    s.failure = real->path + " is not the simulated driver (no uvmpool_sim_* controls); these tests need it";
    return s;
  }
  const Table& t = *s.table;
  if (CUresult r = t.cuInit(0); r != CUDA_SUCCESS) return s.failure = "cuInit: " + cu_name(r), s;
  int count = 0;
  if (CUresult r = t.cuDeviceGetCount(&count); r != CUDA_SUCCESS || count < 1)
    return s.failure = "cuDeviceGetCount: " + cu_name(r), s;
  for (int d = 0; d < count; ++d) {
    CUcontext c = nullptr;
    if (CUresult r = t.cuDevicePrimaryCtxRetain(&c, d); r != CUDA_SUCCESS)
      return s.failure = "cuDevicePrimaryCtxRetain: " + cu_name(r), s;
    s.contexts.push_back(c);
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  if (CUresult r = t.cuMemGetAllocationGranularity(&s.gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS)
    return s.failure = "cuMemGetAllocationGranularity: " + cu_name(r), s;
  return s;
}

Session& session() {
  static Session s = open_session();
  return s;
}

inline std::uint64_t word(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (index * 0xBF58476D1CE4E5B9ull);
  return x ^ (x >> 29);
}

void make_pattern(std::vector<unsigned char>& out, std::size_t offset, std::size_t bytes, std::uint64_t seed) {
  out.resize(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    const std::size_t at = offset + i;
    out[i] = static_cast<unsigned char>(word(seed, at / 8) >> (8 * (at % 8)));
  }
}

// Faster for whole allocations: 8 bytes at a time (offset 0).
void make_pattern_fast(std::vector<unsigned char>& out, std::size_t bytes, std::uint64_t seed) {
  out.resize(bytes);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const std::uint64_t w = word(seed, i / 8);
    std::memcpy(out.data() + i, &w, 8);
  }
  for (; i < bytes; ++i) out[i] = static_cast<unsigned char>(word(seed, i / 8) >> (8 * (i % 8)));
}


}  // namespace

::testing::AssertionResult window_holds(CUdeviceptr p, std::size_t offset, std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> expected;
  make_pattern(expected, offset, bytes, seed);
  std::vector<unsigned char> got(bytes);
  if (CUresult r = drv().cuMemcpyDtoH_v2(got.data(), p + offset, bytes); r != CUDA_SUCCESS)
    return ::testing::AssertionFailure() << "cuMemcpyDtoH of " << bytes << " bytes at 0x" << std::hex
                                         << (p + offset) << std::dec << " answered " << cu_name(r);
  for (std::size_t i = 0; i < bytes; ++i)
    if (got[i] != expected[i])
      return ::testing::AssertionFailure() << "byte " << (offset + i) << " of the allocation at 0x" << std::hex << p
                                           << std::dec << " reads " << int(got[i]) << ", wrote " << int(expected[i]);
  return ::testing::AssertionSuccess();
}

const Table& drv() {
  static const Table empty{};
  const Session& s = session();
  return s.table != nullptr ? *s.table : empty;
}

const Sim& sim() { return session().sim; }

std::string cu_name(CUresult r) {
  const char* name = nullptr;
  const Table& t = drv();
  if (t.cuGetErrorName != nullptr && t.cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr)
    return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")";
  return "CUresult " + std::to_string(static_cast<int>(r));
}

::testing::AssertionResult cu_equal(const char*, const char* call_expr, CUresult expected, CUresult got) {
  if (expected == got) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << call_expr << "\n  answered " << cu_name(got) << "\n  expected "
                                       << cu_name(expected);
}

void hold_stream(CUstream stream, bool held) {
  reinterpret_cast<void (*)(CUstream, int)>(sim().hold_stream)(stream, held ? 1 : 0);
}

void set_capture_status(CUstream stream, CUstreamCaptureStatus status) {
  reinterpret_cast<void (*)(CUstream, int)>(sim().set_capture_status)(stream, static_cast<int>(status));
}

unsigned long long vmm_build_calls() {
  const Sim& s = sim();
  return s.call_count("cuMemCreate") + s.call_count("cuMemMap") + s.call_count("cuMemSetAccess") +
         s.call_count("cuMemAddressReserve") + s.call_count("cuMemUnmap") + s.call_count("cuMemRelease") +
         s.call_count("cuMemAddressFree") + s.call_count("cuMemAlloc");
}

unsigned long long wait_calls() {
  const Sim& s = sim();
  return s.call_count("cuEventSynchronize") + s.call_count("cuStreamSynchronize") +
         s.call_count("cuCtxSynchronize");
}

PoolConfig test_config() {
  PoolConfig c;
  c.headroom = 0;
  c.spill = false;  // the tests written before spill expect OUT_OF_MEMORY at the budget
  c.carve_max = 0;  // the stitched path these suites are about (carving's: CarvingBase, carving_test.cpp)
  return c;
}

PoolConfig limited_config(std::size_t limit_bytes) {
  PoolConfig c = test_config();
  c.device_limit = uvmpool::config::Size{limit_bytes, 0, false};
  return c;
}

PoolConfig spill_config(std::size_t limit_bytes, std::size_t host_limit_bytes, std::size_t host_reserve_bytes) {
  PoolConfig c = limited_config(limit_bytes);
  c.spill = true;
  c.host_limit = uvmpool::config::Size{host_limit_bytes, 0, false};
  c.host_reserve = host_reserve_bytes;
  return c;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

void release_external(Pool& pool, CUmemGenericAllocationHandle handle) {
  const std::uint64_t memory = pool.releasing_external(handle);
  EXPECT_CU(drv().cuMemRelease(handle));
  pool.released_external(memory);
}

CUresult begin_capture(Pool& pool, CUstream stream) {
  pool.capture_beginning(stream);
  const CUresult began = drv().cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
  pool.capture_begun(stream, began);
  return began;
}

CUresult end_capture(Pool& pool, CUstream stream) {
  CUgraph graph = nullptr;
  const CUresult ended = drv().cuStreamEndCapture(stream, &graph);
  if (graph != nullptr) drv().cuGraphDestroy(graph);
  pool.capture_ended(stream);
  return ended;
}

void fill(CUdeviceptr p, std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> data;
  make_pattern_fast(data, bytes, seed);
  ASSERT_CU(drv().cuMemcpyHtoD_v2(p, data.data(), bytes)) << " (writing " << bytes << " bytes at 0x" << std::hex
                                                          << p << ")";
}

::testing::AssertionResult holds(CUdeviceptr p, std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> expected;
  make_pattern_fast(expected, bytes, seed);
  std::vector<unsigned char> got(bytes);
  if (CUresult r = drv().cuMemcpyDtoH_v2(got.data(), p, bytes); r != CUDA_SUCCESS)
    return ::testing::AssertionFailure() << "cuMemcpyDtoH of " << bytes << " bytes at 0x" << std::hex << p
                                         << std::dec << " answered " << cu_name(r);
  if (std::memcmp(got.data(), expected.data(), bytes) == 0) return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (got[i] == expected[i]) ++i;
  return ::testing::AssertionFailure() << "byte " << i << " of the " << bytes << "-byte allocation at 0x" << std::hex
                                       << p << std::dec << " reads " << int(got[i]) << ", wrote "
                                       << int(expected[i]);
}

::testing::AssertionResult holds_sampled(CUdeviceptr p, std::size_t bytes, std::uint64_t seed, std::size_t chunk) {
  constexpr std::size_t kWindow = 256;
  std::vector<std::pair<std::size_t, std::size_t>> windows;  // offset, length
  auto add = [&](std::size_t from, std::size_t to) {
    from = std::min(from, bytes);
    to = std::min(to, bytes);
    if (from < to) windows.emplace_back(from, to - from);
  };
  add(0, kWindow);
  add(bytes > kWindow ? bytes - kWindow : 0, bytes);
  // Around every chunk boundary of the allocation's address range.
  const CUdeviceptr first = (p / chunk + 1) * chunk;
  for (CUdeviceptr b = first; b < p + bytes; b += chunk) add(b - p - std::min<std::size_t>(b - p, kWindow / 2), b - p + kWindow / 2);
  for (auto [offset, length] : windows)
    if (auto r = window_holds(p, offset, length, seed); !r) return r;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult disjoint(std::vector<Block> blocks) {
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) { return a.p < b.p; });
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    const Block& a = blocks[i - 1];
    const Block& b = blocks[i];
    if (a.p + std::max<std::size_t>(a.bytes, 1) > b.p)
      return ::testing::AssertionFailure() << "[0x" << std::hex << a.p << ", +" << std::dec << a.bytes
                                           << ") overlaps [0x" << std::hex << b.p << ", +" << std::dec << b.bytes
                                           << ")";
  }
  return ::testing::AssertionSuccess();
}

std::size_t driver_free() {
  std::size_t free = 0, tot = 0;
  EXPECT_CU(drv().cuMemGetInfo_v2(&free, &tot));
  return free;
}

std::size_t driver_total() {
  std::size_t free = 0, tot = 0;
  EXPECT_CU(drv().cuMemGetInfo_v2(&free, &tot));
  return tot;
}

void PoolTest::SetUp() {
  const Session& s = session();
  ASSERT_TRUE(s.failure.empty()) << s.failure;
  ctx = s.contexts[0];
  gran = s.gran;
  ASSERT_CU(drv().cuCtxSetCurrent(ctx));
  ASSERT_CU(drv().cuDeviceTotalMem_v2(&total, 0));
  s.sim.clear_failures();
  s.sim.reset_counts();
  free_at_start = driver_free();
}

void PoolTest::TearDown() {
  const Session& s = session();
  if (!s.failure.empty()) return;
  s.sim.clear_failures();
  drv().cuCtxSetCurrent(ctx);
}

std::unique_ptr<Pool> PoolTest::make_pool(PoolConfig config) {
  return std::make_unique<Pool>(drv(), config);
}

CUdeviceptr PoolTest::must_allocate(Pool& pool, std::size_t bytes) {
  CUdeviceptr p = 0;
  CUresult r = pool.allocate(&p, bytes);
  EXPECT_CU(r) << " (pool.allocate of " << bytes << " bytes)";
  return r == CUDA_SUCCESS ? p : 0;
}

void PoolTest::must_free(Pool& pool, CUdeviceptr p) {
  CUresult r = CUDA_ERROR_UNKNOWN;
  EXPECT_EQ(pool.deallocate(p, &r), Ownership::Ours) << "0x" << std::hex << p;
  EXPECT_CU(r) << " (pool.deallocate of 0x" << std::hex << p << ")";
}

CUcontext PoolTest::context(int device) { return session().contexts.at(static_cast<std::size_t>(device)); }

int PoolTest::device_count() const { return static_cast<int>(session().contexts.size()); }

}  // namespace pooltest
