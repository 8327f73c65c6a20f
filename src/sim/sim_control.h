// Control API of the simulated driver (libcuda.so.1 built from src/sim): failure injection, call
// counts, held streams and capture status, the virtual clock and the race detector, for tests of code
// that sits on top of the driver. Not part of the real driver; a program that uses it must run against
// the simulated driver (look the functions up with dlsym to stay runnable on a GPU).
//
// ## The kernel catalog
// cuModuleLoadData / cuModuleLoadDataEx / cuLibraryLoadData accept a simulator image: NUL-terminated
// text whose first line is exactly "uvmpool-sim-module 1" (kUvmpoolSimModuleImage below); later lines
// are ignored. Such a module holds every kernel of the catalog below, found by name with
// cuModuleGetFunction / cuLibraryGetKernel. A real image is refused, and the log says why:
//   - ELF (cubin) or fatbin                  -> CUDA_ERROR_NO_BINARY_FOR_GPU
//   - PTX text (".version", ".target", "//") -> CUDA_ERROR_INVALID_PTX
//   - anything else, or NULL                 -> CUDA_ERROR_INVALID_IMAGE (NULL: CUDA_ERROR_INVALID_VALUE)
// Kernels run on the simulated memory through the mappings as they stand when they execute; the
// launch shape (grid, block, shared memory) is checked and otherwise ignored. Every pointer a kernel
// dereferences must be mapped with access for the device of the launching stream's context (cuMemAlloc
// memory of that device, pinned host memory, or a VMM mapping with device access); otherwise the kernel
// does nothing more and its context fails with CUDA_ERROR_ILLEGAL_ADDRESS, sticky as on a GPU.
// Parameter layouts (offset:size in bytes, as cuFuncGetParamInfo answers them, and as nvcc lays them
// out for the same CUDA signatures; tests/benchmarks/kernels/catalog.cu, committed as PTX, has the same kernels for a GPU):
//   uvmpool_fill_u32(uint32_t* dst, uint64_t count, uint32_t value)                 0:8 8:8 16:4
//       dst[i] = value for i < count.
//   uvmpool_copy(void* dst, const void* src, uint64_t bytes)                          0:8 8:8 16:8
//       memmove semantics.
//   uvmpool_sum_u32(const uint32_t* src, uint64_t count, uint64_t* out)              0:8 8:8 16:8
//       *out = sum of src[i] (wrapping at 2^64). On a GPU launch it with one block.
//   uvmpool_touch(const void* p, uint64_t bytes, uint32_t passes, uint32_t write)    0:8 8:8 16:4 20:4
//       Reads the range `passes` times (write == 0), or writes zeros over it `passes` times. For timing:
//       the simulator does the work once and charges it `passes` times.
//   uvmpool_gather_u32(const uint32_t* const* rows, uint64_t row_count, uint64_t row_len, uint32_t* out)
//                                                                                     0:8 8:8 16:8 24:8
//       out[r * row_len + i] = rows[r][i]. The row pointers live in device memory, so the kernel
//       touches memory that its launch arguments do not show.
//   uvmpool_struct_fill_u32(UvmpoolSimStructFill arg)                                 0:48
//       For each non-null arg.p[k]: arg.p[k][i] = arg.value for i < arg.count. Pointers inside a
//       by-value struct, as PyTorch's elementwise kernels pass them.
//
// ## Virtual time
// Every thread has a host clock (nanoseconds, starting where the latest clock of any thread stood when
// the thread first called the driver). A driver call advances it by the call's cost; the costs, the
// bandwidths and the latencies are UVMPOOL_SIM_* options (docs/simulator.md lists them with the
// measurements they come from). Work submitted to a stream (a kernel, a copy, a memset, a host function,
// a wait or write of a value) starts when the stream, its dependencies and its resources allow and
// takes a modeled duration; synchronizing calls move the host clock to the end of what they wait for,
// and cuStreamQuery, cuEventQuery and cuEventElapsedTime answer by comparing virtual times with the
// calling thread's host clock. Resources: per device, ASYNC_ENGINE_COUNT copy engines and one PCIe link
// per direction, shared by copies and by kernels that touch host memory in place (transfers on one
// direction of the link are served one after another, in submission order).
// Effects happen when the work executes, which is at submission unless the stream waits for something
// that has not happened yet (cuStreamWaitValue32/64 on a value nobody has written, an event recorded
// behind such a wait); such work executes, in stream order, when a later driver call (from any thread)
// finds what it waits for. A synchronize that could never finish (a stream waiting for a value while no
// other thread of the process could write it, or after UVMPOOL_SIM_HANG_TIMEOUT_MS of wall time) returns
// CUDA_ERROR_LAUNCH_TIMEOUT instead of hanging.
// The same single-threaded program gets the same virtual times on every run.
//
// ## The race detector
// Every piece of work records the address ranges it really touched and its virtual interval. Changing
// the memory under work that has not finished by the calling thread's host clock is a violation:
// cuMemUnmap, cuMemMap, cuMemRelease of a handle mapped there, cuMemSetAccess that takes the device's
// access away, and cuMemAddressFree. Each violation is logged with both sides (the call and its address;
// the work, its stream and its interval), counted, and fails the work's context with
// CUDA_ERROR_ILLEGAL_ADDRESS. The same call after a synchronize is not a violation.
#pragma once

#include <cuda.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The image cuModuleLoadData and friends accept.
#define UVMPOOL_SIM_MODULE_IMAGE "uvmpool-sim-module 1\n"

// The by-value argument of uvmpool_struct_fill_u32 (48 bytes, 8-aligned).
typedef struct UvmpoolSimStructFill {
  uint32_t* p[4];
  uint64_t count;
  uint32_t value;
} UvmpoolSimStructFill;

// Makes the `nth_call_from_now`-th call (1 = the next one) of a driver function return `cuda_error`
// (a CUresult) without doing anything. `function_symbol_or_base` is an exported symbol
// ("cuMemAlloc_v2", "cuMemcpyAsync_ptsz") or a base name ("cuMemAlloc"); a base name counts the calls
// of all its variants together (a name that is both, like "cuMemcpy", is taken as the base). Several
// armed failures count down independently. Returns 0, or -1 if the function is unknown or
// nth_call_from_now is 0.
int uvmpool_sim_fail(const char* function_symbol_or_base, unsigned nth_call_from_now, int cuda_error);

// Calls of a function since load or the last uvmpool_sim_reset_counts(), failed ones included. A base
// name sums all its variants (so "cuMemcpy" counts cuMemcpy and cuMemcpy_ptds); any other exported
// symbol counts only itself. Unknown names count 0.
unsigned long long uvmpool_sim_call_count(const char* function);

// The modeled host time, in ns of the simulated clock, that calling threads spent inside a function
// (named as for uvmpool_sim_call_count) since load or the last uvmpool_sim_reset_counts(): its base
// cost, what it charged for its work (a cuMemSetAccess per mapping and per byte), and its waits for
// the device. UVMPOOL_SIM_PROFILE writes every function's at exit.
unsigned long long uvmpool_sim_call_ns(const char* function);

// Sets every call count and modeled time to 0 (armed failures keep counting down).
void uvmpool_sim_reset_counts(void);

// Disarms every pending failure, those from UVMPOOL_SIM_FAIL included.
void uvmpool_sim_clear_failures(void);

// Makes the work of a created stream look unfinished (held != 0) or finished (held == 0), whatever
// the virtual clock says, so that stream-ordered reuse can be tested. While held, cuStreamQuery answers
// CUDA_ERROR_NOT_READY, and an event recorded on the stream stays incomplete (cuEventQuery ->
// CUDA_ERROR_NOT_READY, cuEventElapsedTime -> CUDA_ERROR_NOT_READY) until the hold ends. The hold ends,
// completing every such event, on uvmpool_sim_hold_stream(stream, 0), or when something waits for it
// as on a GPU: cuStreamSynchronize of the stream, cuEventSynchronize of such an event, cuCtxSynchronize
// in the stream's context; these then return CUDA_SUCCESS. Destroying the stream (or its context) also
// ends it. Only queries change: operations submitted to a held stream still execute as usual, and a
// stream that waits (cuStreamWaitEvent) for an incomplete event is not held. Default streams (0,
// CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) and unknown handles are ignored.
void uvmpool_sim_hold_stream(CUstream stream, int held);

// Makes cuStreamIsCapturing (and _ptsz) on a created stream answer `status` (a CUstreamCaptureStatus)
// until set again or the stream is destroyed; a new stream answers CU_STREAM_CAPTURE_STATUS_NONE.
// Nothing else changes: no graph is built and every call on the stream works as without capture.
// Default streams, unknown handles and statuses other than NONE, ACTIVE and INVALIDATED are ignored.
void uvmpool_sim_set_capture_status(CUstream stream, int status);

// The calling thread's host clock, in virtual nanoseconds.
uint64_t uvmpool_sim_now_ns(void);

// Advances the calling thread's host clock by `ns` (host work between two driver calls).
void uvmpool_sim_advance_host_ns(uint64_t ns);

// Violations the race detector found since load or the last uvmpool_sim_reset_clock().
unsigned long long uvmpool_sim_violations(void);

// Directions of the PCIe link, for uvmpool_sim_link_bytes.
enum UvmpoolSimLinkDirection {
  UVMPOOL_SIM_HOST_TO_DEVICE = 0,
  UVMPOOL_SIM_DEVICE_TO_HOST = 1,
};

// Bytes carried by `device`'s PCIe link in one direction since load or the last reset: copies, and
// kernels and memsets that read (host to device) or write (device to host) host memory in place.
// 0 for an unknown device or direction.
unsigned long long uvmpool_sim_link_bytes(int device, int direction);

// Work items (kernels, copies, memsets, host functions, value waits and writes) executed since load or
// the last reset.
unsigned long long uvmpool_sim_work_count(void);

// Waits (in virtual time) for all work, then sets every host clock, stream timeline and resource back
// to 0 and clears the violation count, the link byte counts, the work count and the detector's records.
// Sticky context errors stay. For tests and benchmarks that measure one phase; call it while no other
// thread uses the driver.
void uvmpool_sim_reset_clock(void);

#ifdef __cplusplus
}
#endif
