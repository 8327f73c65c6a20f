// The kernel catalog (sim_control.h): modules and libraries, each kernel's effect on memory, parameter
// info, every launch form, and faults.
#include <cstring>
#include <vector>

#include "catalog_layouts.h"
#include "sim_test.h"

namespace simtest {
namespace {

using Kernels = KernelTest;

std::uint64_t sum_on_device(CUfunction sum, CUdeviceptr src, std::uint64_t count) {
  CUdeviceptr out = 0;
  EXPECT_CU(cuMemAlloc(&out, sizeof(std::uint64_t)));
  EXPECT_CU(launch(sum, nullptr, src, count, out));
  std::uint64_t value = 0;
  EXPECT_CU(cuMemcpyDtoH(&value, out, sizeof value));
  EXPECT_CU(cuMemFree(out));
  return value;
}

TEST_F(Kernels, FillWritesEveryElementAndSumReadsThemBack) {
  constexpr std::uint64_t kCount = 1000;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kCount * 4 + 64));
  ASSERT_CU(cuMemsetD8(p, 0xff, kCount * 4 + 64));
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), nullptr, p, kCount, std::uint32_t{7}));
  const auto values = read_back(p, kCount + 1);
  for (std::uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], 7u) << i;
  EXPECT_EQ(values[kCount], 0xffffffffu);  // nothing past count
  EXPECT_EQ(sum_on_device(kernel("uvmpool_sum_u32"), p, kCount), 7 * kCount);
}

TEST_F(Kernels, CopyMovesBytesBetweenDeviceAndHostTiers) {
  constexpr std::size_t kBytes = 3 * kMiB;
  CUdeviceptr device = 0, host = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAlloc(&device, kBytes));
  ASSERT_CU(make_vmm(4 * kMiB, pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0), &host, &h));
  std::vector<unsigned char> pattern(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 31 + 7);
  ASSERT_CU(cuMemcpyHtoD(device, pattern.data(), kBytes));
  ASSERT_CU(launch(kernel("uvmpool_copy"), nullptr, host, device, std::uint64_t{kBytes}));
  std::vector<unsigned char> back(kBytes);
  ASSERT_CU(cuMemcpyDtoH(back.data(), host, kBytes));
  EXPECT_EQ(back, pattern);
}

TEST_F(Kernels, TouchWritesZerosOrOnlyReads) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  ASSERT_CU(cuMemsetD32(p, 5, 1024));
  CUfunction touch = kernel("uvmpool_touch");
  ASSERT_CU(launch(touch, nullptr, p, std::uint64_t{4096}, std::uint32_t{3}, std::uint32_t{0}));
  EXPECT_EQ(read_back(p, 1024), std::vector<std::uint32_t>(1024, 5));
  ASSERT_CU(launch(touch, nullptr, p, std::uint64_t{2048}, std::uint32_t{3}, std::uint32_t{1}));
  const auto values = read_back(p, 1024);
  EXPECT_EQ(values[0], 0u);
  EXPECT_EQ(values[511], 0u);
  EXPECT_EQ(values[512], 5u);
}

TEST_F(Kernels, GatherReadsRowsThroughPointersInDeviceMemory) {
  constexpr std::uint64_t kRows = 3, kLen = 4;
  CUdeviceptr rows[kRows] = {}, table = 0, out = 0;
  for (std::uint64_t r = 0; r < kRows; ++r) {
    ASSERT_CU(cuMemAlloc(&rows[r], kLen * 4));
    ASSERT_CU(cuMemsetD32(rows[r], static_cast<unsigned>(10 + r), kLen));
  }
  ASSERT_CU(cuMemAlloc(&table, sizeof rows));
  ASSERT_CU(cuMemcpyHtoD(table, rows, sizeof rows));
  ASSERT_CU(cuMemAlloc(&out, kRows * kLen * 4));
  ASSERT_CU(launch(kernel("uvmpool_gather_u32"), nullptr, table, kRows, kLen, out));
  const auto values = read_back(out, kRows * kLen);
  for (std::uint64_t i = 0; i < kRows * kLen; ++i) EXPECT_EQ(values[i], 10 + i / kLen) << i;
}

TEST_F(Kernels, StructFillFollowsPointersInsideAByValueStruct) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, 64));
  ASSERT_CU(cuMemAlloc(&b, 64));
  UvmpoolSimStructFill arg{};
  arg.p[0] = reinterpret_cast<std::uint32_t*>(a);
  arg.p[2] = reinterpret_cast<std::uint32_t*>(b);
  arg.count = 16;
  arg.value = 99;
  ASSERT_CU(launch(kernel("uvmpool_struct_fill_u32"), nullptr, arg));
  EXPECT_EQ(read_back(a, 16), std::vector<std::uint32_t>(16, 99));
  EXPECT_EQ(read_back(b, 16), std::vector<std::uint32_t>(16, 99));
}


TEST_F(Kernels, ParamInfoAnswersEachParameterOfFunctionsAndKernelsAndNothingPastTheLast) {
  CUlibrary library = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, UVMPOOL_SIM_MODULE_IMAGE, nullptr, nullptr, 0, nullptr, nullptr, 0));
  for (const uvmpool::bench::CatalogLayout& layout : uvmpool::bench::kCatalogLayouts) {
    SCOPED_TRACE(layout.name);
    CUkernel k = nullptr;
    ASSERT_CU(cuLibraryGetKernel(&k, library, layout.name));
    CUfunction from_kernel = nullptr;
    ASSERT_CU(cuKernelGetFunction(&from_kernel, k));
    // As measured on an H200: a CUkernel cast to a CUfunction is refused here (launches take it).
    std::size_t unused = 0;
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuFuncGetParamInfo(reinterpret_cast<CUfunction>(k), 0, &unused, nullptr));
    for (CUfunction f : {kernel(layout.name), from_kernel}) {
      for (std::size_t i = 0; i < layout.params.size(); ++i) {
        std::size_t offset = 99, size = 99;
        ASSERT_CU(cuFuncGetParamInfo(f, i, &offset, &size));
        EXPECT_EQ(offset, layout.params[i].first);
        EXPECT_EQ(size, layout.params[i].second);
      }
      std::size_t offset = 0, size = 0;
      EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuFuncGetParamInfo(f, layout.params.size(), &offset, &size));
    }
    std::size_t offset = 0, size = 0;
    ASSERT_CU(cuKernelGetParamInfo(k, layout.params.size() - 1, &offset, &size));
    EXPECT_EQ(offset, layout.params.back().first);
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuKernelGetParamInfo(k, layout.params.size(), &offset, &size));
  }
  CUfunction f = kernel("uvmpool_fill_u32");
  std::size_t offset = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuKernelGetParamInfo(reinterpret_cast<CUkernel>(f), 0, &offset, nullptr));
  EXPECT_CU(cuLibraryUnload(library));
}

// A function's attributes and occupancy, as the runtime asks them (cudaFuncGetAttributes,
// cudaFuncSetAttribute, cudaOccupancy*): the settable two are kept per function, in each context for a
// library's kernel; the rest are the binary's; bad values, handles and devices are refused.
TEST_F(Kernels, AFunctionsAttributesAndOccupancyAnswerAndBadOnesAreRefused) {
  CUfunction f = kernel("uvmpool_fill_u32");
  int value = 0;
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  EXPECT_EQ(value, 1024);
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
  EXPECT_EQ(value, 48 << 10);
  ASSERT_CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200 << 10));
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
  EXPECT_EQ(value, 200 << 10);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 300 << 10));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 8));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuFuncGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX, f));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS,
                                                             reinterpret_cast<CUfunction>(&value)));
  EXPECT_CU(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuFuncSetCacheConfig(f, static_cast<CUfunc_cache>(7)));
  EXPECT_CU(cuFuncLoad(f));

  int blocks = 0;
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0));
  EXPECT_EQ(blocks, 8);
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 1024, 100 << 10, 0));
  EXPECT_EQ(blocks, 2) << "200 KiB were allowed above";
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 2048, 0));
  EXPECT_EQ(blocks, 0) << "a block past the limit fits nowhere";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 0, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 32, 0, 0x10));

  CUlibrary library = nullptr;
  CUkernel k = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, UVMPOOL_SIM_MODULE_IMAGE, nullptr, nullptr, 0, nullptr, nullptr, 0));
  ASSERT_CU(cuLibraryGetKernel(&k, library, "uvmpool_fill_u32"));
  ASSERT_CU(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10, k, 0));
  ASSERT_CU(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0));
  EXPECT_EQ(value, 100 << 10);
  CUfunction from_kernel = nullptr;
  ASSERT_CU(cuKernelGetFunction(&from_kernel, k));
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, from_kernel));
  EXPECT_EQ(value, 100 << 10) << "the kernel's function in this context is the one set";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 99));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE,
               cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, reinterpret_cast<CUkernel>(f), 0));
  EXPECT_CU(cuLibraryUnload(library));
}

// Every launch entry point, each writing its own value into its own slot.
TEST_F(Kernels, EveryLaunchFormRunsTheKernel) {
  CUlibrary library = nullptr;
  CUkernel fill_kernel = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, UVMPOOL_SIM_MODULE_IMAGE, nullptr, nullptr, 0, nullptr, nullptr, 0));
  ASSERT_CU(cuLibraryGetKernel(&fill_kernel, library, "uvmpool_fill_u32"));
  CUfunction fill = kernel("uvmpool_fill_u32");
  constexpr int kForms = 9;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kForms * 4));
  ASSERT_CU(cuMemsetD32(p, 0, kForms));
  auto args = [&](int slot, std::uint64_t& count, std::uint32_t& value, CUdeviceptr& dst) {
    dst = p + 4 * slot;
    count = 1;
    value = 100 + slot;
  };
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  using CoopFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**);
  void* pfn = nullptr;
  ASSERT_CU(cuGetProcAddress("cuLaunchKernel", &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  auto launch_ptsz = reinterpret_cast<LaunchFn>(pfn);
  ASSERT_CU(cuGetProcAddress("cuLaunchKernelEx", &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  auto launch_ex_ptsz = reinterpret_cast<LaunchExFn>(pfn);
  ASSERT_CU(cuGetProcAddress("cuLaunchCooperativeKernel", &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                             nullptr));
  auto coop_ptsz = reinterpret_cast<CoopFn>(pfn);

  CUdeviceptr dst = 0;
  std::uint64_t count = 0;
  std::uint32_t value = 0;
  void* params[] = {&dst, &count, &value};
  struct {
    CUdeviceptr dst;
    std::uint64_t count;
    std::uint32_t value;
    std::uint32_t pad;
  } buffer{};
  std::size_t buffer_size = sizeof buffer;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                   CU_LAUNCH_PARAM_END};
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;

  args(0, count, value, dst);
  ASSERT_CU(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  args(1, count, value, dst);
  buffer = {dst, count, value, 0};
  ASSERT_CU(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra));
  args(2, count, value, dst);
  ASSERT_CU(launch_ptsz(fill, 2, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  args(3, count, value, dst);
  ASSERT_CU(cuLaunchKernelEx(&config, fill, params, nullptr));
  args(4, count, value, dst);
  buffer = {dst, count, value, 0};
  ASSERT_CU(launch_ex_ptsz(&config, fill, nullptr, extra));
  args(5, count, value, dst);
  ASSERT_CU(cuLaunchCooperativeKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params));
  args(6, count, value, dst);
  ASSERT_CU(coop_ptsz(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params));
  args(7, count, value, dst);
  ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(fill_kernel), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  args(8, count, value, dst);
  ASSERT_CU(cuLaunchKernelEx(&config, reinterpret_cast<CUfunction>(fill_kernel), params, nullptr));

  const auto values = read_back(p, kForms);
  for (int i = 0; i < kForms; ++i) EXPECT_EQ(values[i], 100u + i) << "form " << i;
  EXPECT_CU(cuLibraryUnload(library));
}

TEST_F(Kernels, ParameterFormsAreCheckedLikeTheDriverDoes) {
  CUfunction fill = kernel("uvmpool_fill_u32");
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  std::uint64_t count = 1;
  std::uint32_t value = 1;
  void* params[] = {&p, &count, &value};
  char buffer[24] = {};
  std::size_t small = 16;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &small, CU_LAUNCH_PARAM_END};
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fill, 0, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fill, 1, 1, 1, 1024, 2, 1, 0, nullptr, params, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE,
               cuLaunchKernel(reinterpret_cast<CUfunction>(&count), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  EXPECT_EQ(uvmpool_sim_violations(), 0u);
}

TEST_F(Kernels, RealImagesAreRefusedWithTheErrorThatSaysWhy) {
  CUmodule m = nullptr;
  const char elf[] = "\x7f" "ELF\x02\x01\x01";
  const unsigned char fatbin[] = {0x50, 0xed, 0x55, 0xba, 1, 0, 0, 0};
  EXPECT_CU_EQ(CUDA_ERROR_NO_BINARY_FOR_GPU, cuModuleLoadData(&m, elf));
  EXPECT_CU_EQ(CUDA_ERROR_NO_BINARY_FOR_GPU, cuModuleLoadData(&m, fatbin));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_PTX, cuModuleLoadData(&m, "//\n// Generated by NVIDIA NVVM Compiler\n.version 8.0\n"));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_PTX, cuModuleLoadDataEx(&m, ".version 8.0\n.target sm_90\n", 0, nullptr, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_IMAGE, cuModuleLoadData(&m, "uvmpool-sim-module 2\n"));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuModuleLoadData(&m, nullptr));
  CUlibrary l = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_PTX, cuLibraryLoadData(&l, ".version 8.0\n", nullptr, nullptr, 0, nullptr, nullptr, 0));
}

TEST_F(Kernels, UnknownNamesAreNotFoundAndUnloadedHandlesAreInvalid) {
  CUfunction f = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&f, module, "no_such_kernel"));
  CUfunction fill = kernel("uvmpool_fill_u32");
  ASSERT_CU(cuModuleUnload(module));
  std::size_t offset = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuFuncGetParamInfo(fill, 0, &offset, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuModuleUnload(module));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuModuleGetFunction(&f, module, "uvmpool_fill_u32"));
}

// A kernel that reaches memory with nothing mapped fails its context, and every later call in it.
TEST_F(Kernels, TouchingUnmappedMemoryFailsTheContextStickily) {
  CUdeviceptr reserved = 0;
  ASSERT_CU(cuMemAddressReserve(&reserved, kGranularity, 0, 0, 0));
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), nullptr, reserved, std::uint64_t{4}, std::uint32_t{1}));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxSynchronize());
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuMemAlloc(&p, 4096));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuStreamSynchronize(nullptr));
  // A new primary context is usable again.
  ASSERT_CU(cuDevicePrimaryCtxReset(0));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
  ASSERT_CU(cuCtxSetCurrent(ctx));
  EXPECT_CU(cuMemAlloc(&p, 4096));
  cuDevicePrimaryCtxRelease(0);
}

// Guard mode (UVMPOOL_GUARD) relies on this: a range mapped at the start of a larger reservation, and
// a kernel that reads or writes one element past the mapping into the unmapped rest faults, sticky,
// while up to the mapping's end it runs. The faulting write changes nothing.
TEST_F(Kernels, ReachingPastAMappingIntoTheUnmappedRestOfItsReservationFaults) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemAddressReserve(&va, 2 * kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&h, kGranularity, &prop, 0));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, h, 0));
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemSetAccess(va, kGranularity, &rw, 1));
  constexpr std::uint64_t kWords = kGranularity / 4;
  const CUdeviceptr last = va + kGranularity - 4;
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), nullptr, va, kWords, std::uint32_t{7}));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), nullptr, last, std::uint64_t{2}, std::uint32_t{9}));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxSynchronize());
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuStreamSynchronize(nullptr));
  EXPECT_EQ(*reinterpret_cast<const std::uint32_t*>(last), 7u) << "the simulated device memory is host memory";
  // Reading past the end faults as well (in a fresh primary context: the old one stays failed).
  ASSERT_CU(cuDevicePrimaryCtxReset(0));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
  ASSERT_CU(cuCtxSetCurrent(ctx));
  CUmodule fresh = nullptr;
  ASSERT_CU(cuModuleLoadData(&fresh, UVMPOOL_SIM_MODULE_IMAGE));
  CUfunction sum = nullptr;
  ASSERT_CU(cuModuleGetFunction(&sum, fresh, "uvmpool_sum_u32"));
  ASSERT_CU(launch(sum, nullptr, last, std::uint64_t{2}, va));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxSynchronize());
  cuDevicePrimaryCtxRelease(0);
  EXPECT_CU(cuMemUnmap(va, kGranularity));
  EXPECT_CU(cuMemRelease(h));
  EXPECT_CU(cuMemAddressFree(va, 2 * kGranularity));
}

TEST_F(Kernels, MemoryWithoutDeviceAccessFaults) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  ASSERT_CU(cuMemAddressReserve(&va, kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&h, kGranularity, &prop, 0));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, h, 0));
  const CUmemAccessDesc host_only = access(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  ASSERT_CU(cuMemSetAccess(va, kGranularity, &host_only, 1));
  ASSERT_CU(launch(kernel("uvmpool_touch"), nullptr, va, std::uint64_t{64}, std::uint32_t{1}, std::uint32_t{0}));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxSynchronize());
}

}  // namespace
}  // namespace simtest
