// cuPointerGetAttribute(s) on device allocations, pinned host memory, VMM ranges and unknown memory.
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

class PointerAttributes : public SimTest {
 protected:
  template <typename T>
  T get(CUpointer_attribute attribute, CUdeviceptr p) {
    T value{};
    EXPECT_CU(cuPointerGetAttribute(&value, attribute, p)) << " attribute " << static_cast<int>(attribute);
    return value;
  }
};

TEST_F(PointerAttributes, DeviceAllocationIsDeviceMemoryOfItsContext) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 3 * kMiB + 5));
  const CUdeviceptr inside = p + kMiB;
  EXPECT_EQ(get<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, inside), static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(get<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, inside), ctx);
  EXPECT_EQ(get<int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, inside), 0);
  EXPECT_EQ(get<CUdeviceptr>(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, inside), inside);
  EXPECT_EQ(get<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inside), p);
  EXPECT_EQ(get<std::size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, inside), 3 * kMiB + 5);
  EXPECT_EQ(get<std::size_t>(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, inside), 4 * kMiB);  // whole 2 MiB pages
  EXPECT_EQ(get<int>(CU_POINTER_ATTRIBUTE_MAPPED, inside), 1);
  EXPECT_EQ(get<int>(CU_POINTER_ATTRIBUTE_IS_MANAGED, inside), 0);
  EXPECT_EQ(get<int>(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, inside), 1);
  EXPECT_EQ(get<CUmemoryPool>(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, inside), nullptr);
  void* host = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, inside));
}

TEST_F(PointerAttributes, BufferIdsAreUniquePerAllocationAndNeverReused) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, kMiB));
  ASSERT_CU(cuMemAlloc(&b, kMiB));
  const auto id_a = get<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, a);
  EXPECT_EQ(get<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 100), id_a);
  EXPECT_NE(get<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, b), id_a);
  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemAlloc(&a, kMiB));
  EXPECT_NE(get<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, a), id_a);
}

TEST_F(PointerAttributes, PinnedHostMemoryIsHostMemoryWithOneAddress) {
  void* host = nullptr;
  ASSERT_CU(cuMemHostAlloc(&host, kMiB, CU_MEMHOSTALLOC_DEVICEMAP));
  const auto p = reinterpret_cast<CUdeviceptr>(host) + 16;
  EXPECT_EQ(get<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  EXPECT_EQ(get<void*>(CU_POINTER_ATTRIBUTE_HOST_POINTER, p), reinterpret_cast<void*>(p));
  EXPECT_EQ(get<CUdeviceptr>(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p), p);
  EXPECT_EQ(get<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, p), ctx);
}

TEST_F(PointerAttributes, DeviceVmmBelongsToNoContextAndItsRangeIsTheReservation) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle a = 0, b = 0;
  CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  ASSERT_CU(cuMemAddressReserve(&va, 3 * kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&a, kGranularity, &prop, 0));
  ASSERT_CU(cuMemCreate(&b, kGranularity, &prop, 0));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, a, 0));
  ASSERT_CU(cuMemMap(va + kGranularity, kGranularity, 0, b, 0));
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemSetAccess(va, 2 * kGranularity, &rw, 1));
  const CUdeviceptr inside = va + kGranularity + 16;
  EXPECT_EQ(get<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, inside), static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(get<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, inside), nullptr);
  EXPECT_EQ(get<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inside), va);
  EXPECT_EQ(get<std::size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, inside), 3 * kGranularity);
  EXPECT_EQ(get<CUdeviceptr>(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, inside), va + kGranularity);
  EXPECT_EQ(get<std::size_t>(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, inside), kGranularity);
  EXPECT_EQ(get<int>(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, inside), 0);
  EXPECT_EQ(get<unsigned long long>(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, inside),
            static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  EXPECT_EQ(get<int>(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, inside), CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
  EXPECT_NE(get<unsigned long long>(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va),
            get<unsigned long long>(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, inside));
}

TEST_F(PointerAttributes, HostLocatedVmmIsHostMemory) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(make_vmm(kGranularity, pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0), &va, &h));
  EXPECT_EQ(get<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 64), static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  EXPECT_EQ(get<int>(CU_POINTER_ATTRIBUTE_MAPPED, va + 64), 1);
}

TEST_F(PointerAttributes, UnknownOrUnmappedMemoryIsInvalidValueForGetAttribute) {
  std::vector<char> plain(4096);
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemAddressReserve(&va, kGranularity, 0, 0, 0));
  for (CUdeviceptr p : {reinterpret_cast<CUdeviceptr>(plain.data()), va}) {
    unsigned type = 0;
    CUcontext owner = nullptr;
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
  }
}

TEST_F(PointerAttributes, GetAttributesOfUnknownMemorySucceedsWithDefaults) {
  std::vector<char> plain(4096);
  const auto p = reinterpret_cast<CUdeviceptr>(plain.data());
  unsigned type = 7;
  CUcontext owner = reinterpret_cast<CUcontext>(0x1);
  void* host = nullptr;
  int ordinal = 7;
  std::uint64_t mapped = ~std::uint64_t{0};
  CUdeviceptr start = 12345;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_MAPPED, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
  void* out[] = {&type, &owner, &host, &ordinal, &mapped, &start};
  ASSERT_CU(cuPointerGetAttributes(6, which, out, p));
  EXPECT_EQ(type, 0u);
  EXPECT_EQ(owner, nullptr);
  EXPECT_EQ(host, plain.data());  // as the real driver answers (measured)
  EXPECT_EQ(ordinal, -2);
  EXPECT_EQ(mapped, 0xFFFFFFFF00000000ull) << "a 4-byte 0";
  EXPECT_EQ(start, 12345u) << "left unwritten";
}

TEST_F(PointerAttributes, GetAttributesAnswersLikeGetAttributeForKnownMemory) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kMiB));
  unsigned type = 0;
  int ordinal = -1;
  unsigned long long id = 0;
  void* host = reinterpret_cast<void*>(0x1);
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_HOST_POINTER};
  void* out[] = {&type, &ordinal, &id, &host};
  ASSERT_CU(cuPointerGetAttributes(4, which, out, p + 8));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(ordinal, 0);
  EXPECT_EQ(id, get<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
  EXPECT_EQ(host, nullptr);  // device memory has no host pointer
  CUpointer_attribute bogus[] = {static_cast<CUpointer_attribute>(999)};
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes(1, bogus, out, p));
}

TEST_F(PointerAttributes, BooleansAreWrittenAsFourBytes) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kMiB));
  std::uint64_t word = ~std::uint64_t{0};
  ASSERT_CU(cuPointerGetAttribute(&word, CU_POINTER_ATTRIBUTE_MAPPED, p));
  EXPECT_EQ(word, 0xFFFFFFFF00000001ull);
  word = ~std::uint64_t{0};
  ASSERT_CU(cuPointerGetAttribute(&word, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  EXPECT_EQ(word, 0xFFFFFFFF00000000ull);
}

}  // namespace
}  // namespace simtest
