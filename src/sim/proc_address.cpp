// cuGetProcAddress (v1 and _v2) and cuGetExportTable.
#include "sim/devices.h"
#include "sim/entry_points.h"

namespace uvmpool::sim {
namespace {

// Resolves like the real driver (driver::find_entry): the highest version of `symbol` not above
// `cudaVersion`, per-thread variants when the flags ask for them. Each answer is the exported function,
// so calls made through it are counted and can fail on request like direct calls. A version above
// the driver's is CUDA_ERROR_INVALID_VALUE (documented, and measured on an H200).
CUresult resolve(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* symbolFound, CUresult not_found) {
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~kKnownFlags) != 0 || cudaVersion > kDriverVersion)
    return CUDA_ERROR_INVALID_VALUE;
  const int entry = driver::find_entry(symbol, cudaVersion, flags);
  if (entry < 0) {
    // The 12.0 form writes NULL; the 11.3 form leaves *pfn as it was (both measured on an H200).
    if (not_found == CUDA_SUCCESS) *pfn = nullptr;
    if (symbolFound != nullptr) {
      bool exists = false;
      for (const driver::FunctionInfo& f : driver::kFunctions) exists = exists || std::string_view(symbol) == f.base;
      *symbolFound = exists ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return not_found;
  }
  *pfn = export_address(entry);
  if (symbolFound != nullptr) *symbolFound = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

// The CUDA 11.3 form says "not found" with CUDA_ERROR_NOT_FOUND (it has no symbolStatus).
CUresult impl::cuGetProcAddress(const char* symbol, void** pfn, int driverVersion, cuuint64_t flags) {
  return resolve(symbol, pfn, driverVersion, flags, nullptr, CUDA_ERROR_NOT_FOUND);
}

// The CUDA 12 form answers CUDA_SUCCESS with *pfn = NULL and says why in *symbolFound (documented,
// and measured on an H200 with driver 580).
CUresult impl::cuGetProcAddress_v2(const char* symbol, void** pfn, int driverVersion, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult* symbolFound) {
  return resolve(symbol, pfn, driverVersion, flags, symbolFound, CUDA_SUCCESS);
}

// The sim has no private export tables (the CUDA runtime's hidden interfaces); it answers every table
// id as the real driver answers an unknown one: CUDA_ERROR_INVALID_VALUE and *ppExportTable = NULL.
CUresult impl::cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (ppExportTable != nullptr) *ppExportTable = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace uvmpool::sim
