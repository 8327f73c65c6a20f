// cuPointerGetAttribute(s) on cuMemAlloc, VMM (device- and host-located), cuMemHostAlloc and
// unknown memory.
#include "fidelity.h"

namespace fidelity {
namespace {

class PointerAttributes : public DriverTest {
 protected:
  // Boolean attributes are read into a zeroed 64-bit word, so the answer is the same whether the
  // driver writes a 1-byte bool or a 4-byte int.
  template <typename T>
  CUresult attr(T* out, CUpointer_attribute a, CUdeviceptr p) {
    return CU(cuPointerGetAttribute, static_cast<void*>(out), a, p);
  }
  std::uint64_t flag(CUpointer_attribute a, CUdeviceptr p) {
    std::uint64_t v = 0;
    EXPECT_CU(attr(&v, a, p)) << " attribute " << static_cast<int>(a);
    return v;
  }
  unsigned memory_type(CUdeviceptr p) {
    unsigned v = 0;
    EXPECT_CU(attr(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    return v;
  }
  // cuPointerGetAttributes of a pointer the driver does not know: success, and (measured on an H200,
  // driver 580.159.04) NULL/0 as cuda.h says, except HOST_POINTER, which is the pointer itself, and
  // DEVICE_ORDINAL, which is -2 (cudaPointerGetAttributes' "no device"). Booleans are written as 4
  // bytes. RANGE_START_ADDR/RANGE_SIZE are left unwritten (not checked here).
  void expect_unknown_pointer_defaults(CUdeviceptr p) {
    unsigned type = 0xFFFFFFFFu;
    CUcontext owner = reinterpret_cast<CUcontext>(~std::uintptr_t{0});
    CUdeviceptr dptr = ~CUdeviceptr{0};
    void* host = nullptr;
    std::uint64_t managed = ~std::uint64_t{0}, mapped = ~std::uint64_t{0};
    unsigned long long id = ~0ULL;
    int ordinal = 77;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED,     CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MAPPED};
    void* out[] = {&type, &owner, &dptr, &host, &managed, &id, &ordinal, &mapped};
    ASSERT_CU(CU(cuPointerGetAttributes, 8u, which, out, p));
    EXPECT_EQ(type, 0u);
    EXPECT_EQ(owner, nullptr);
    EXPECT_EQ(dptr, 0u);
    EXPECT_EQ(host, reinterpret_cast<void*>(p));
    EXPECT_EQ(managed, 0xFFFFFFFF00000000ull) << "IS_MANAGED: 4 bytes of 0";
    EXPECT_EQ(mapped, 0xFFFFFFFF00000000ull) << "MAPPED: 4 bytes of 0";
    EXPECT_EQ(id, 0u);
    EXPECT_EQ(ordinal, -2);
  }
};

TEST_F(PointerAttributes, AllocIsDeviceMemoryOfDeviceZeroInTheCurrentContext) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, gran));
  const CUdeviceptr inside = p + 4096 + 8;
  EXPECT_EQ(memory_type(inside), static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  int ordinal = -1;
  EXPECT_CU(attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, inside));
  EXPECT_EQ(ordinal, 0);
  CUcontext owner = nullptr;
  EXPECT_CU(attr(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, inside));
  EXPECT_EQ(owner, ctx);
  CUdeviceptr dptr = 0;
  EXPECT_CU(attr(&dptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, inside));
  EXPECT_EQ(dptr, inside);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_MAPPED, inside), 1u);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_IS_MANAGED, inside), 0u);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, inside), 1u);  // NCCL relies on it
}

TEST_F(PointerAttributes, AllocRangeIsTheAllocationContainingAnInteriorPointer) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, 2 * gran));
  CUdeviceptr start = 0;
  std::size_t size = 0;
  EXPECT_CU(attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + gran + 5));
  EXPECT_CU(attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + gran + 5));
  EXPECT_EQ(start, p);
  EXPECT_EQ(size, 2 * gran);
}

TEST_F(PointerAttributes, BufferIdsAreNonzeroDistinctAndSharedWithinAnAllocation) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(mem_alloc(&a, kMiB));
  ASSERT_CU(mem_alloc(&b, kMiB));
  unsigned long long ida = 0, ida_inside = 0, idb = 0;
  ASSERT_CU(attr(&ida, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
  ASSERT_CU(attr(&ida_inside, CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 1000));
  ASSERT_CU(attr(&idb, CU_POINTER_ATTRIBUTE_BUFFER_ID, b));
  EXPECT_NE(ida, 0u);
  EXPECT_NE(idb, 0u);
  EXPECT_NE(ida, idb);
  EXPECT_EQ(ida, ida_inside);
}

TEST_F(PointerAttributes, BufferIdsAreNotReusedAfterFree) {
  CUdeviceptr a = 0;
  unsigned long long first = 0, second = 0;
  ASSERT_CU(mem_alloc(&a, kMiB));
  ASSERT_CU(attr(&first, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
  ASSERT_CU(mem_free(a));
  ASSERT_CU(mem_alloc(&a, kMiB));  // quite likely at the same address
  ASSERT_CU(attr(&second, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
  EXPECT_NE(first, second);
}

TEST_F(PointerAttributes, GetAttributesAnswersLikeGetAttributeForAnAlloc) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, gran));
  unsigned type = 0;
  int ordinal = -1;
  CUcontext owner = nullptr;
  CUdeviceptr start = 0;
  std::size_t size = 0;
  unsigned long long id = 0, id1 = 0;
  std::uint64_t managed = 0, mapped = 0;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,     CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_CONTEXT,         CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE,      CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,      CU_POINTER_ATTRIBUTE_MAPPED};
  void* out[] = {&type, &ordinal, &owner, &start, &size, &id, &managed, &mapped};
  ASSERT_CU(CU(cuPointerGetAttributes, 8u, which, out, p + 64));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(ordinal, 0);
  EXPECT_EQ(owner, ctx);
  EXPECT_EQ(start, p);
  EXPECT_EQ(size, gran);
  ASSERT_CU(attr(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
  EXPECT_EQ(id, id1);
  EXPECT_EQ(managed, 0u);
  EXPECT_EQ(mapped, 1u);
}

TEST_F(PointerAttributes, DeviceVmmIsDeviceMemoryOfDeviceZeroAndNotLegacyIpcCapable) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  const CUdeviceptr inside = va + 4096;
  EXPECT_EQ(memory_type(inside), static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  int ordinal = -1;
  EXPECT_CU(attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, inside));
  EXPECT_EQ(ordinal, 0);
  CUdeviceptr dptr = 0;
  EXPECT_CU(attr(&dptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, inside));
  EXPECT_EQ(dptr, inside);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_MAPPED, inside), 1u);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_IS_MANAGED, inside), 0u);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, inside), 0u);  // NCCL's test for cuMem
  unsigned long long id = 0;
  EXPECT_CU(attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, inside));
  EXPECT_NE(id, 0u);
  std::uint64_t handle_types = 99;
  EXPECT_CU(attr(&handle_types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, inside));
  EXPECT_EQ(handle_types & 0xFFFFFFFFu, static_cast<std::uint64_t>(CU_MEM_HANDLE_TYPE_NONE));
}

TEST_F(PointerAttributes, DeviceVmmRangeAttributesDescribeTheReservation) {
  // cuda.h: RANGE_START_ADDR/RANGE_SIZE are those of the mappable range (cuMemAddressReserve),
  // not of the mapped piece (that is cuMemGetAddressRange's answer).
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  ASSERT_CU(address_reserve(&va, 3 * gran));
  ASSERT_CU(mem_create(&h1, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_create(&h2, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, gran, h1));
  ASSERT_CU(mem_map(va + gran, gran, h2));
  ASSERT_CU(grant_device(va, 2 * gran));
  CUdeviceptr start = 0;
  std::size_t size = 0;
  EXPECT_CU(attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + gran + 16));
  EXPECT_CU(attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + gran + 16));
  EXPECT_EQ(start, va);
  EXPECT_EQ(size, 3 * gran);
}

TEST_F(PointerAttributes, DeviceVmmMappingAttributesDescribeTheMappedPiece) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  ASSERT_CU(address_reserve(&va, 3 * gran));
  ASSERT_CU(mem_create(&h1, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_create(&h2, 2 * gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, gran, h1));
  ASSERT_CU(mem_map(va + gran, 2 * gran, h2));
  ASSERT_CU(grant_device(va, 3 * gran));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  EXPECT_CU(attr(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, va + gran + 16));
  EXPECT_CU(attr(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + gran + 16));
  EXPECT_EQ(base, va + gran);
  EXPECT_EQ(size, 2 * gran);
}

TEST_F(PointerAttributes, DeviceVmmAccessFlagsAreReadWrite) {
  CUdeviceptr va = 0, p = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  ASSERT_CU(mem_alloc(&p, kMiB));
  std::uint64_t flags = 0;
  EXPECT_CU(attr(&flags, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va));
  EXPECT_EQ(flags & 0xFFFFFFFFu, static_cast<std::uint64_t>(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
  flags = 0;
  EXPECT_CU(attr(&flags, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, p));
  EXPECT_EQ(flags & 0xFFFFFFFFu, static_cast<std::uint64_t>(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
}

TEST_F(PointerAttributes, DeviceVmmHasNoContext) {
  // Measured (H200, driver 580.159.04): VMM memory belongs to no context; success with NULL.
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  CUcontext owner = reinterpret_cast<CUcontext>(0x1);
  EXPECT_CU(attr(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, va));
  EXPECT_EQ(owner, nullptr);
}

TEST_F(PointerAttributes, HostNumaVmmIsHostMemory) {
  int supported = 0;
  if (CU(cuDeviceGetAttribute, &supported,
         CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS ||
      supported != 1)
    GTEST_SKIP() << "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  std::size_t g = 0;
  ASSERT_CU(vmm_host(&va, &h, &g));
  EXPECT_EQ(memory_type(va + 64), static_cast<unsigned>(CU_MEMORYTYPE_HOST));  // measured, H200
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_MAPPED, va + 64), 1u);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_IS_MANAGED, va + 64), 0u);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va + 64), 0u);
}

TEST_F(PointerAttributes, HostAllocIsHostMemoryWithTheSameHostAndDevicePointer) {
  void* hp = nullptr;
  ASSERT_CU(host_alloc(&hp, kMiB, CU_MEMHOSTALLOC_DEVICEMAP));
  const auto p = reinterpret_cast<CUdeviceptr>(hp);
  EXPECT_EQ(memory_type(p + 16), static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  void* host = nullptr;
  CUdeviceptr dptr = 0;
  EXPECT_CU(attr(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p + 16));
  EXPECT_CU(attr(&dptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p + 16));
  EXPECT_EQ(host, reinterpret_cast<void*>(p + 16));
  EXPECT_EQ(dptr, p + 16);  // unified addressing: one address for both
  CUcontext owner = nullptr;
  EXPECT_CU(attr(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
  EXPECT_EQ(owner, ctx);
  EXPECT_EQ(flag(CU_POINTER_ATTRIBUTE_IS_MANAGED, p), 0u);
  CUdeviceptr mapped = 0;
  EXPECT_CU(CU(cuMemHostGetDevicePointer_v2, &mapped, hp, 0u));
  EXPECT_EQ(mapped, p);
}

TEST_F(PointerAttributes, HostAllocIsReachableByDeviceCopies) {
  void* hp = nullptr;
  ASSERT_CU(host_alloc(&hp, kMiB, CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr d = 0;
  ASSERT_CU(mem_alloc(&d, kMiB));
  ASSERT_CU(CU(cuMemsetD32_v2, d, 0x12345678u, kMiB / 4));
  ASSERT_CU(CU(cuMemcpyDtoD_v2, reinterpret_cast<CUdeviceptr>(hp), d, kMiB));
  ASSERT_CU(CU(cuCtxSynchronize));
  EXPECT_EQ(static_cast<std::uint32_t*>(hp)[kMiB / 4 - 1], 0x12345678u);
}

TEST_F(PointerAttributes, GetAttributeOfAnUnknownHostPointerIsInvalidValue) {
  std::vector<char> plain(4096);
  const auto p = reinterpret_cast<CUdeviceptr>(plain.data());
  unsigned type = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
  CUcontext owner = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, attr(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
  void* host = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, attr(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p));
}

TEST_F(PointerAttributes, GetAttributesOfAnUnknownHostPointerIsSuccessWithDefaultValues) {
  // cuda.h: "the attributes are assigned default NULL values and function returns CUDA_SUCCESS".
  std::vector<char> plain(4096);
  expect_unknown_pointer_defaults(reinterpret_cast<CUdeviceptr>(plain.data()));
}

TEST_F(PointerAttributes, GetAttributesOfAFreedAllocAreTheUnknownPointersDefaults) {
  // What uvmpool answers for pool memory the program freed (src/driver/pointer_attribute_values.h):
  // a freed device pointer is one the driver does not know, as pageable host memory is (measured on
  // an H200, driver 580.159.04).
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  ASSERT_CU(mem_free(p));
  expect_unknown_pointer_defaults(p);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, CU(cuMemGetAddressRange_v2, &base, &size, p));
}

TEST_F(PointerAttributes, BooleanAttributesAreWrittenAsFourBytes) {
  // A caller's 4-byte variable must not be overrun, nor half-written.
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  for (auto a : {CU_POINTER_ATTRIBUTE_MAPPED, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE}) {
    std::uint64_t v = ~std::uint64_t{0};
    EXPECT_CU(attr(&v, a, p));
    EXPECT_EQ(v, 0xFFFFFFFF00000001ull) << "attribute " << static_cast<int>(a);
  }
  std::uint64_t managed = ~std::uint64_t{0};
  EXPECT_CU(attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  EXPECT_EQ(managed, 0xFFFFFFFF00000000ull);
}

TEST_F(PointerAttributes, AllocMappingAttributesCoverTheAllocationRoundedToTheGranularity) {
  // Measured (H200, driver 580.159.04): a 3 MiB + 5 B allocation maps 4 MiB from its base.
  const std::size_t size = 3 * kMiB + 5;
  CUdeviceptr p = 0, base = 0;
  std::size_t mapping = 0;
  ASSERT_CU(mem_alloc(&p, size));
  EXPECT_CU(attr(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p + kMiB));
  EXPECT_CU(attr(&mapping, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p + kMiB));
  EXPECT_EQ(base, p);
  EXPECT_EQ(mapping, round_up(size, gran));
}

TEST_F(PointerAttributes, AttributesOfAReservedButUnmappedAddressAreInvalidValue) {
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  unsigned type = 0;
  std::uint64_t mapped = 0;
  CUdeviceptr start = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, attr(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, va));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va));
}

TEST_F(PointerAttributes, GetAttributeOfAFreedAllocIsInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  ASSERT_CU(mem_free(p));
  unsigned type = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
}

}  // namespace
}  // namespace fidelity
