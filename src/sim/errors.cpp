// cuGetErrorName / cuGetErrorString for every CUresult of cuda.h 13.0. The descriptions follow the
// real driver's strings (as its cuGetErrorString returns them), so messages read the same in logs.
#include "sim/errors.h"

#include <charconv>
#include <cstring>

#include "sim/entry_points.h"

namespace uvmpool::sim {
namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* description;
};

#define UVMPOOL_ERR(code, text) {code, #code, text}
constexpr ErrorText kErrors[] = {
    UVMPOOL_ERR(CUDA_SUCCESS, "no error"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    UVMPOOL_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    UVMPOOL_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    UVMPOOL_ERR(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
    UVMPOOL_ERR(CUDA_ERROR_PROFILER_NOT_INITIALIZED,
                "profiler not initialized: call cudaProfilerInitialize()"),
    UVMPOOL_ERR(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
    UVMPOOL_ERR(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
    UVMPOOL_ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    UVMPOOL_ERR(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "API call requires a newer CUDA driver"),
    UVMPOOL_ERR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    UVMPOOL_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    UVMPOOL_ERR(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    UVMPOOL_ERR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    UVMPOOL_ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    UVMPOOL_ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    UVMPOOL_ERR(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    UVMPOOL_ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    UVMPOOL_ERR(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    UVMPOOL_ERR(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
    UVMPOOL_ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    UVMPOOL_ERR(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
    UVMPOOL_ERR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE,
                "exclusive-thread device already in use by a different thread"),
    UVMPOOL_ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
    UVMPOOL_ERR(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
    UVMPOOL_ERR(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
    UVMPOOL_ERR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                "the provided PTX was compiled with an unsupported toolchain."),
    UVMPOOL_ERR(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
    UVMPOOL_ERR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
    UVMPOOL_ERR(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
                "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    UVMPOOL_ERR(CUDA_ERROR_CONTAINED, "Invalid access of peer GPU memory over nvlink or a hardware error"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    UVMPOOL_ERR(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    UVMPOOL_ERR(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
    UVMPOOL_ERR(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
    UVMPOOL_ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    UVMPOOL_ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    UVMPOOL_ERR(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    UVMPOOL_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    UVMPOOL_ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    UVMPOOL_ERR(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    UVMPOOL_ERR(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
    UVMPOOL_ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    UVMPOOL_ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    UVMPOOL_ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
    UVMPOOL_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    UVMPOOL_ERR(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    UVMPOOL_ERR(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
    UVMPOOL_ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                "part or all of the requested memory range is already mapped"),
    UVMPOOL_ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                "pointer does not correspond to a registered memory region"),
    UVMPOOL_ERR(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
    UVMPOOL_ERR(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
    UVMPOOL_ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    UVMPOOL_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    UVMPOOL_ERR(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
    UVMPOOL_ERR(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    UVMPOOL_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    UVMPOOL_ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    UVMPOOL_ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
                "system has unsupported display driver / cuda driver combination"),
    UVMPOOL_ERR(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
                "forward compatibility was attempted on non supported HW"),
    UVMPOOL_ERR(CUDA_ERROR_MPS_CONNECTION_FAILED,
                "MPS client failed to connect to the MPS control daemon or the MPS server"),
    UVMPOOL_ERR(CUDA_ERROR_MPS_RPC_FAILURE,
                "the remote procedural call between the MPS server and the MPS client failed"),
    UVMPOOL_ERR(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
    UVMPOOL_ERR(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,
                "the hardware resources required to create MPS client have been exhausted"),
    UVMPOOL_ERR(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,
                "the hardware resources required to support device connections have been exhausted"),
    UVMPOOL_ERR(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
    UVMPOOL_ERR(CUDA_ERROR_CDP_NOT_SUPPORTED,
                "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it"),
    UVMPOOL_ERR(CUDA_ERROR_CDP_VERSION_MISMATCH,
                "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                "operation failed due to a previous error during capture"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_MERGE,
                "operation would result in a merge of separate capture sequences"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                "dependency created on uncaptured work in another stream"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                "operation would make the legacy stream depend on a capturing blocking stream"),
    UVMPOOL_ERR(CUDA_ERROR_CAPTURED_EVENT,
                "operation not permitted on an event last recorded in a capturing stream"),
    UVMPOOL_ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                "attempt to terminate a thread-local capture sequence from another thread"),
    UVMPOOL_ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    UVMPOOL_ERR(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
                "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    UVMPOOL_ERR(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occured in external entity outside of CUDA"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_CLUSTER_SIZE,
                "a kernel launch error has occurred due to cluster misconfiguration"),
    UVMPOOL_ERR(CUDA_ERROR_FUNCTION_NOT_LOADED,
                "the function handle is not loaded when calling an API that requires a loaded function"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_RESOURCE_TYPE,
                "one or more resources passed in are not valid resource types for the operation"),
    UVMPOOL_ERR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
                "one or more resources are insufficient or non-applicable for the operation"),
    UVMPOOL_ERR(CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence"),
    UVMPOOL_ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef UVMPOOL_ERR

const ErrorText* find(CUresult code) {
  for (const ErrorText& e : kErrors)
    if (e.code == code) return &e;
  return nullptr;
}

// The real driver answers an unknown code with CUDA_ERROR_INVALID_VALUE and sets *pStr to NULL.
CUresult describe(CUresult code, const char** out, bool name) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find(code);
  *out = e == nullptr ? nullptr : (name ? e->name : e->description);
  return e == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

}  // namespace

const char* error_name(CUresult code) {
  const ErrorText* e = find(code);
  return e == nullptr ? nullptr : e->name;
}

std::optional<CUresult> error_from_text(std::string_view text) {
  int number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec == std::errc() && end == text.data() + text.size()) return static_cast<CUresult>(number);
  constexpr std::string_view kPrefix = "CUDA_ERROR_";
  for (const ErrorText& e : kErrors) {
    const std::string_view name = e.name;
    if (text == name || (name.starts_with(kPrefix) && text == name.substr(kPrefix.size()))) return e.code;
  }
  return std::nullopt;
}

CUresult impl::cuGetErrorString(CUresult error, const char** pStr) { return describe(error, pStr, false); }

CUresult impl::cuGetErrorName(CUresult error, const char** pStr) { return describe(error, pStr, true); }

}  // namespace uvmpool::sim
