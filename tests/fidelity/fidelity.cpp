#include "fidelity.h"

#include <algorithm>
#include <cstring>

namespace fidelity {
namespace {

// What the whole program shares: the driver, device 0, its primary context, its granularity.
struct Session {
  const Table* table = nullptr;
  std::string skip;     // why every test is skipped (no driver, no device)
  std::string failure;  // why every test fails (the driver misbehaved while opening)
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  std::size_t gran = 0;
  std::size_t total = 0;
};

std::string step_failed(const char* what, CUresult r) {
  return std::string(what) + " failed: " + cu_name(r);
}

Session open_session() {
  Session s;
  const auto* real = uvmpool::driver::real();
  if (real == nullptr) {
    s.skip = "no CUDA driver could be opened (no GPU driver here; set UVMPOOL_DRIVER_PATH to "
             "<build>/sim/libcuda.so.1 to test the simulator)";
    return s;
  }
  s.table = &real->table;
  const Table& t = *s.table;
  if (t.cuInit == nullptr) {
    s.failure = real->path + " exports no cuInit";
    return s;
  }
  CUresult r = t.cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_STUB_LIBRARY) {
    s.skip = "cuInit(0) on " + real->path + " answered " + cu_name(r) + ": no usable device";
    return s;
  }
  if (r != CUDA_SUCCESS) return s.failure = step_failed("cuInit(0)", r), s;
  int count = 0;
  if ((r = call(t.cuDeviceGetCount, "cuDeviceGetCount", &count)) != CUDA_SUCCESS)
    return s.failure = step_failed("cuDeviceGetCount", r), s;
  if (count < 1) return s.skip = "the driver reports no device", s;
  if ((r = call(t.cuDeviceGet, "cuDeviceGet", &s.dev, 0)) != CUDA_SUCCESS)
    return s.failure = step_failed("cuDeviceGet(0)", r), s;
  if ((r = call(t.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", &s.ctx, s.dev)) !=
      CUDA_SUCCESS)
    return s.failure = step_failed("cuDevicePrimaryCtxRetain", r), s;
  if ((r = call(t.cuCtxSetCurrent, "cuCtxSetCurrent", s.ctx)) != CUDA_SUCCESS)
    return s.failure = step_failed("cuCtxSetCurrent", r), s;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  if ((r = call(t.cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", &s.gran, &prop,
                CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS)
    return s.failure = step_failed("cuMemGetAllocationGranularity", r), s;
  if ((r = call(t.cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2", &s.total, s.dev)) != CUDA_SUCCESS)
    return s.failure = step_failed("cuDeviceTotalMem_v2", r), s;
  return s;
}

Session& session() {
  static Session s = open_session();
  return s;
}

// Gives the primary context back when the program ends (after every test has cleaned up).
class ReleasePrimaryContext : public ::testing::Environment {
 public:
  void TearDown() override {
    Session& s = session();
    if (s.table != nullptr && s.ctx != nullptr && s.table->cuDevicePrimaryCtxRelease_v2 != nullptr)
      s.table->cuDevicePrimaryCtxRelease_v2(s.dev);
  }
};
[[maybe_unused]] auto* const kReleaseAtExit =
    ::testing::AddGlobalTestEnvironment(new ReleasePrimaryContext);

template <typename T>
bool forget(std::vector<T>& v, const T& x) {
  auto it = std::find(v.begin(), v.end(), x);
  if (it == v.end()) return false;
  v.erase(it);
  return true;
}

}  // namespace

const Table& drv() {
  static const Table empty{};
  const Session& s = session();
  return s.table != nullptr ? *s.table : empty;
}

std::string cu_name(CUresult r) {
  const char* name = nullptr;
  const Session& s = session();  // safe: cu_name is not used before the session exists
  if (s.table != nullptr && s.table->cuGetErrorName != nullptr &&
      s.table->cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr)
    return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")";
  return "CUresult " + std::to_string(static_cast<int>(r));
}

::testing::AssertionResult cu_equal(const char* expected_expr, const char* call_expr,
                                    CUresult expected, CUresult got) {
  if (expected == got) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << call_expr << "\n  answered " << cu_name(got)
                                       << "\n  expected " << cu_name(expected);
}

CUmemAllocationProp pinned_prop(CUmemLocationType type, int id) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = type;
  prop.location.id = id;
  return prop;
}

CUmemAccessDesc access_desc(CUmemLocationType type, int id, CUmemAccess_flags flags) {
  CUmemAccessDesc desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.location.type = type;
  desc.location.id = id;
  desc.flags = flags;
  return desc;
}

void DriverTest::SetUp() {
  const Session& s = session();
  if (!s.skip.empty()) GTEST_SKIP() << s.skip;
  ASSERT_TRUE(s.failure.empty()) << s.failure;
  dev = s.dev;
  ctx = s.ctx;
  gran = s.gran;
  total = s.total;
  ASSERT_CU(CU(cuCtxSetCurrent, ctx));
  // A sticky error left by an earlier test would make every later one fail for no reason of its own.
  ASSERT_CU(CU(cuCtxSynchronize)) << " (the context was already broken when this test began)";
}

void DriverTest::TearDown() {
  if (session().table == nullptr || ctx == nullptr) return;
  EXPECT_CU(CU(cuCtxSetCurrent, ctx));
  EXPECT_CU(CU(cuCtxSynchronize));
  for (const Range& m : mappings_) EXPECT_CU(CU(cuMemUnmap, m.p, m.bytes)) << " (cleanup)";
  for (auto h : handles_) EXPECT_CU(CU(cuMemRelease, h)) << " (cleanup)";
  for (const Range& r : reservations_) EXPECT_CU(CU(cuMemAddressFree, r.p, r.bytes)) << " (cleanup)";
  for (auto p : allocs_) EXPECT_CU(CU(cuMemFree_v2, p)) << " (cleanup)";
  for (auto p : host_) EXPECT_CU(CU(cuMemFreeHost, p)) << " (cleanup)";
  mappings_.clear();
  handles_.clear();
  reservations_.clear();
  allocs_.clear();
  host_.clear();
}

CUresult DriverTest::mem_alloc(CUdeviceptr* p, std::size_t bytes) {
  CUresult r = CU(cuMemAlloc_v2, p, bytes);
  if (r == CUDA_SUCCESS) allocs_.push_back(*p);
  return r;
}

CUresult DriverTest::mem_free(CUdeviceptr p) {
  CUresult r = CU(cuMemFree_v2, p);
  if (r == CUDA_SUCCESS) forget(allocs_, p);
  return r;
}

CUresult DriverTest::mem_create(CUmemGenericAllocationHandle* h, std::size_t bytes,
                                const CUmemAllocationProp& prop) {
  CUresult r = CU(cuMemCreate, h, bytes, &prop, 0ULL);
  if (r == CUDA_SUCCESS) handles_.push_back(*h);
  return r;
}

CUresult DriverTest::mem_release(CUmemGenericAllocationHandle h) {
  CUresult r = CU(cuMemRelease, h);
  if (r == CUDA_SUCCESS) forget(handles_, h);
  return r;
}

void DriverTest::track_handle(CUmemGenericAllocationHandle h) { handles_.push_back(h); }

CUresult DriverTest::address_reserve(CUdeviceptr* p, std::size_t bytes, std::size_t alignment) {
  CUresult r = CU(cuMemAddressReserve, p, bytes, alignment, CUdeviceptr{0}, 0ULL);
  if (r == CUDA_SUCCESS) reservations_.push_back({*p, bytes});
  return r;
}

CUresult DriverTest::address_free(CUdeviceptr p, std::size_t bytes) {
  CUresult r = CU(cuMemAddressFree, p, bytes);
  if (r == CUDA_SUCCESS)
    std::erase_if(reservations_, [&](const Range& x) { return x.p == p && x.bytes == bytes; });
  return r;
}

CUresult DriverTest::mem_map(CUdeviceptr p, std::size_t bytes, CUmemGenericAllocationHandle h) {
  CUresult r = CU(cuMemMap, p, bytes, std::size_t{0}, h, 0ULL);
  if (r == CUDA_SUCCESS) mappings_.push_back({p, bytes});
  return r;
}

CUresult DriverTest::mem_unmap(CUdeviceptr p, std::size_t bytes) {
  CUresult r = CU(cuMemUnmap, p, bytes);
  if (r == CUDA_SUCCESS)
    std::erase_if(mappings_, [&](const Range& x) { return x.p == p && x.bytes == bytes; });
  return r;
}

CUresult DriverTest::host_alloc(void** p, std::size_t bytes, unsigned flags) {
  CUresult r = CU(cuMemHostAlloc, p, bytes, flags);
  if (r == CUDA_SUCCESS) host_.push_back(*p);
  return r;
}

CUresult DriverTest::grant_device(CUdeviceptr p, std::size_t bytes) {
  const CUmemAccessDesc desc = access_desc(CU_MEM_LOCATION_TYPE_DEVICE, static_cast<int>(dev));
  return CU(cuMemSetAccess, p, bytes, &desc, std::size_t{1});
}

CUresult DriverTest::vmm_device(CUdeviceptr* p, CUmemGenericAllocationHandle* h,
                                std::size_t bytes) {
  CUresult r = address_reserve(p, bytes);
  if (r == CUDA_SUCCESS) r = mem_create(h, bytes, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  if (r == CUDA_SUCCESS) r = mem_map(*p, bytes, *h);
  if (r == CUDA_SUCCESS) r = grant_device(*p, bytes);
  return r;
}

CUresult DriverTest::vmm_host(CUdeviceptr* p, CUmemGenericAllocationHandle* h, std::size_t* bytes) {
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  CUresult r = CU(cuMemGetAllocationGranularity, bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_SUCCESS) r = address_reserve(p, *bytes);
  if (r == CUDA_SUCCESS) r = mem_create(h, *bytes, prop);
  if (r == CUDA_SUCCESS) r = mem_map(*p, *bytes, *h);
  if (r == CUDA_SUCCESS) r = grant_device(*p, *bytes);
  return r;
}

std::vector<std::uint32_t> DriverTest::read_words(CUdeviceptr p, std::size_t count) {
  std::vector<std::uint32_t> out(count, 0xDEADBEEFu);
  EXPECT_CU(CU(cuMemcpyDtoH_v2, out.data(), p, count * sizeof(std::uint32_t)));
  return out;
}

CUresult DriverTest::write_words(CUdeviceptr p, const std::vector<std::uint32_t>& words) {
  return CU(cuMemcpyHtoD_v2, p, words.data(), words.size() * sizeof(std::uint32_t));
}

std::vector<std::uint32_t> DriverTest::pattern(std::size_t count, std::uint32_t seed) {
  std::vector<std::uint32_t> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = seed * 2654435761u + static_cast<std::uint32_t>(i);
  return v;
}

std::size_t DriverTest::free_bytes() {
  std::size_t free = 0, tot = 0;
  EXPECT_CU(CU(cuMemGetInfo_v2, &free, &tot));
  return free;
}

NoCurrentContext::NoCurrentContext() {
  const Table& t = drv();
  CUresult r = call(t.cuCtxGetCurrent, "cuCtxGetCurrent", &saved_);
  // Pop until nothing is current (the fixture made the primary context current with SetCurrent,
  // which replaces the top of the stack, so one pop leaves the stack empty).
  CUcontext popped = nullptr;
  if (r == CUDA_SUCCESS && saved_ != nullptr) r = call(t.cuCtxPopCurrent_v2, "cuCtxPopCurrent_v2", &popped);
  result_ = r;
}

NoCurrentContext::~NoCurrentContext() {
  if (saved_ != nullptr) {
    EXPECT_CU(call(drv().cuCtxSetCurrent, "cuCtxSetCurrent", saved_));
  }
}

}  // namespace fidelity
