// cuInit gating, the driver version, error names and strings, export tables.
#include <unistd.h>

#include "sim_test.h"

namespace simtest {
namespace {

// Runs in a fresh process (threadsafe death test): the driver has not seen cuInit there yet.
bool calls_before_init_are_refused_then_work_after() {
  bool ok = true;
  int count = 0, version = 0;
  CUdeviceptr p = 0;
  CUcontext ctx = nullptr;
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ok &= cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED;
  ok &= cuMemAlloc(&p, 4096) == CUDA_ERROR_NOT_INITIALIZED;
  ok &= cuCtxGetCurrent(&ctx) == CUDA_ERROR_NOT_INITIALIZED;
  ok &= cuMemCreate(&h, kGranularity, &prop, 0) == CUDA_ERROR_NOT_INITIALIZED;
  ok &= cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_ERROR_NOT_INITIALIZED;
  // These work before cuInit, as on the real driver.
  ok &= cuDriverGetVersion(&version) == CUDA_SUCCESS && version == 13000;
  const char* name = nullptr;
  ok &= cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name) == CUDA_SUCCESS && name != nullptr;
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult found{};
  ok &= cuGetProcAddress("cuInit", &pfn, 13000, 0, &found) == CUDA_SUCCESS && pfn != nullptr;
  ok &= cuInit(0) == CUDA_SUCCESS;
  ok &= cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 1;
  return ok;
}

TEST(Init, CallsBeforeCuInitAreNotInitializedAndWorkAfterIt) {
  EXPECT_EXIT(_exit(calls_before_init_are_refused_then_work_after() ? 0 : 1), ::testing::ExitedWithCode(0), "");
}

TEST(Init, NonZeroFlagsAreInvalidValue) {
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuInit(1));
  EXPECT_CU(cuInit(0));
  EXPECT_CU(cuInit(0));  // again: harmless
}

TEST(Init, DriverVersionIsCuda13) {
  int version = 0;
  ASSERT_CU(cuDriverGetVersion(&version));
  EXPECT_EQ(version, 13000);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(nullptr));
}

TEST(Errors, CommonCodesHaveTheirEnumeratorNameAndTheDriversDescription) {
  struct Expected {
    CUresult code;
    const char* name;
    const char* text;
  };
  const Expected expected[] = {
      {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
      {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
      {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
      {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
      {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
      {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
      {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
      {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
      {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
      {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
      {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
  };
  for (const Expected& e : expected) {
    const char* name = nullptr;
    const char* text = nullptr;
    ASSERT_CU(cuGetErrorName(e.code, &name));
    ASSERT_CU(cuGetErrorString(e.code, &text));
    EXPECT_STREQ(name, e.name);
    EXPECT_STREQ(text, e.text);
  }
}

TEST(Errors, EveryCodeUpToOneThousandHasANameOrIsUnknown) {
  // Known codes name themselves consistently; unknown ones are refused with a NULL string.
  int known = 0;
  for (int code = 0; code < 1000; ++code) {
    const char* name = reinterpret_cast<const char*>(1);
    const char* text = reinterpret_cast<const char*>(1);
    const CUresult by_name = cuGetErrorName(static_cast<CUresult>(code), &name);
    const CUresult by_text = cuGetErrorString(static_cast<CUresult>(code), &text);
    EXPECT_EQ(by_name, by_text) << code;
    if (by_name == CUDA_SUCCESS) {
      ++known;
      EXPECT_NE(name, nullptr);
      EXPECT_NE(text, nullptr);
    } else {
      EXPECT_EQ(by_name, CUDA_ERROR_INVALID_VALUE) << code;
      EXPECT_EQ(name, nullptr) << code;
      EXPECT_EQ(text, nullptr) << code;
    }
  }
  EXPECT_GE(known, 100);  // cuda.h 13.0 defines 103 codes
}

TEST(Errors, UnknownCodeIsInvalidValueWithNullString) {
  const char* text = "untouched";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGetErrorString(static_cast<CUresult>(12345), &text));
  EXPECT_EQ(text, nullptr);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGetErrorName(CUDA_SUCCESS, nullptr));
}

TEST(ExportTable, EveryTableIdIsInvalidValueWithNullTable) {
  const CUuuid id{};
  const void* table = &id;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGetExportTable(&table, &id));
  EXPECT_EQ(table, nullptr);
}

}  // namespace
}  // namespace simtest
