// Modules, libraries and kernel launches over the kernel catalog (kernels.h), host functions, and the
// stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64).
//
// Handles: a CUmodule or CUlibrary is a Module; a CUfunction is a Function (one kernel of a module, or
// of a library in one context); a CUkernel is a LibraryKernel. Launches take a CUfunction or a CUkernel
// cast to one, as the real driver does. Handles stay valid until their module or library is unloaded;
// a stale or foreign handle is CUDA_ERROR_INVALID_HANDLE, never a crash.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/log.h"
#include "driver/batch_mem_ops.h"
#include "sim/address_space.h"
#include "sim/contexts.h"
#include "sim/device_memory.h"
#include "sim/devices.h"
#include "sim/entry_points.h"
#include "sim/kernels.h"
#include "sim/launch.h"
#include "sim/sim_control.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {

struct Module;

// A function's limits, as an H100 or H200 reports them (sm_90: 227 KiB of shared memory a block with
// the opt-in, 48 KiB without; 1024 threads a block, 2048 a multiprocessor).
constexpr int kDefaultDynamicShared = 48 * 1024;
constexpr int kMaxDynamicShared = 227 * 1024;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxThreadsPerSm = 2048;

struct Function {
  const KernelInfo* kernel;
  Context* context;  // where it runs
  Module* module;
  bool loaded = false;  // launched once (lazy loading: the first launch loads it); Registry::mutex
  // Set with cuFuncSetAttribute / cuKernelSetAttribute; Registry::mutex.
  int max_dynamic_shared = kDefaultDynamicShared;
  int carveout = -1;  // CU_SHAREDMEM_CARVEOUT_DEFAULT
};

struct LibraryKernel {
  const KernelInfo* kernel;
  Module* library;
};

struct Module {
  bool library = false;
  Context* context = nullptr;  // modules: the context loaded in; libraries: none
  std::map<std::string, std::unique_ptr<Function>> functions;                    // modules
  std::map<std::string, std::unique_ptr<LibraryKernel>> kernels;                 // libraries
  std::map<std::pair<const KernelInfo*, Context*>, std::unique_ptr<Function>> in_context;  // libraries
};

// Every live module and library, and the handles handed out of them. Guarded by mutex.
struct Registry {
  std::mutex mutex;
  std::map<const void*, std::unique_ptr<Module>> modules;
  std::map<const void*, Function*> functions;
  std::map<const void*, LibraryKernel*> kernels;
};

Registry& registry() {
  static Registry* const instance = new Registry;  // never destroyed: calls may come during exit
  return *instance;
}

// What the image is, for a clear refusal of real ones.
CUresult check_image(const void* image) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* text = static_cast<const char*>(image);
  constexpr std::string_view kHeader = UVMPOOL_SIM_MODULE_IMAGE;
  if (std::strncmp(text, kHeader.data(), kHeader.size() - 1) == 0 &&
      (text[kHeader.size() - 1] == '\n' || text[kHeader.size() - 1] == '\0'))
    return CUDA_SUCCESS;
  const auto* bytes = static_cast<const unsigned char*>(image);
  const std::uint32_t magic = static_cast<std::uint32_t>(bytes[0]) | bytes[1] << 8 | bytes[2] << 16 |
                              static_cast<std::uint32_t>(bytes[3]) << 24;
  constexpr std::uint32_t kFatbin = 0xBA55ED50, kFatbinWrapper = 0x466243B1;
  if (std::memcmp(bytes, "\x7f" "ELF", 4) == 0 || magic == kFatbin || magic == kFatbinWrapper) {
    log::error("the simulated driver cannot run a cubin or fatbin; it runs its own kernel catalog (an image "
               "starting \"uvmpool-sim-module 1\", see sim/sim_control.h)");
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  std::string_view start(text, strnlen(text, 64));
  start.remove_prefix(std::min(start.find_first_not_of(" \t\r\n"), start.size()));
  if (start.starts_with("//") || start.starts_with(".version") || start.starts_with(".target")) {
    log::error("the simulated driver cannot compile PTX; it runs its own kernel catalog (an image starting "
               "\"uvmpool-sim-module 1\", see sim/sim_control.h)");
    return CUDA_ERROR_INVALID_PTX;
  }
  return CUDA_ERROR_INVALID_IMAGE;
}

CUresult load(void** out, const void* image, bool library) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (!library)
    if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  if (CUresult status = check_image(image); status != CUDA_SUCCESS) return status;
  auto module = std::make_unique<Module>();
  module->library = library;
  module->context = context;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  *out = module.get();
  r.modules.emplace(module.get(), std::move(module));
  return CUDA_SUCCESS;
}

CUresult unload(const void* handle, bool library) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.modules.find(handle);
  if (it == r.modules.end() || it->second->library != library) return CUDA_ERROR_INVALID_HANDLE;
  std::erase_if(r.functions, [&](const auto& f) { return f.second->module == it->second.get(); });
  std::erase_if(r.kernels, [&](const auto& k) { return k.second->library == it->second.get(); });
  r.modules.erase(it);
  return CUDA_SUCCESS;
}

// The function a launch names: a CUfunction, or a CUkernel cast to one (in the current context).
// Caller holds the registry's mutex.
CUresult find_function(Registry& r, CUfunction f, Function** out) {
  if (auto it = r.functions.find(f); it != r.functions.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  auto k = r.kernels.find(f);
  if (k == r.kernels.end()) return CUDA_ERROR_INVALID_HANDLE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  auto& slot = k->second->library->in_context[{k->second->kernel, context}];
  if (!slot) {
    slot = std::make_unique<Function>(Function{k->second->kernel, context, k->second->library});
    r.functions.emplace(slot.get(), slot.get());
  }
  *out = slot.get();
  return CUDA_SUCCESS;
}

CUresult param_info(const KernelInfo* kernel, size_t index, size_t* offset, size_t* size) {
  if (offset == nullptr && size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (index >= kernel->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = kernel->params[index].offset;
  if (size != nullptr) *size = kernel->params[index].size;
  return CUDA_SUCCESS;
}

struct Shape {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
};

// Limits of the simulated devices (devices.cpp's attributes).
CUresult check_shape(const Shape& s) {
  constexpr unsigned long long kMaxThreads = 1024, kMaxSharedBytes = 232448;  // H100 opt-in maximum
  for (unsigned d : s.grid)
    if (d == 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned d : s.block)
    if (d == 0) return CUDA_ERROR_INVALID_VALUE;
  if (s.grid[1] > 65535 || s.grid[2] > 65535 || s.grid[0] > 2147483647u) return CUDA_ERROR_INVALID_VALUE;
  if (1ull * s.block[0] * s.block[1] * s.block[2] > kMaxThreads || s.block[2] > 64) return CUDA_ERROR_INVALID_VALUE;
  if (s.shared_bytes > kMaxSharedBytes) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// The argument buffer from either form: kernelParams (one pointer per parameter) or extra
// (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE), never both.
CUresult gather_args(const KernelInfo* kernel, void** params, void** extra, std::vector<std::byte>* out) {
  out->assign(kernel->param_bytes, std::byte{0});
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr) {
    for (std::size_t i = 0; i < kernel->params.size(); ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(out->data() + kernel->params[i].offset, params[i], kernel->params[i].size);
    }
    return CUDA_SUCCESS;
  }
  if (extra == nullptr) return kernel->params.empty() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  const void* buffer = nullptr;
  const std::size_t* size = nullptr;
  for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER)
      buffer = e[1];
    else if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE)
      size = static_cast<const std::size_t*>(e[1]);
    else
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (buffer == nullptr || size == nullptr || *size < kernel->param_bytes) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(out->data(), buffer, kernel->param_bytes);
  return CUDA_SUCCESS;
}

// Lazy loading (CUDA_MODULE_LOADING=LAZY, the real driver's default since CUDA 12.2): a kernel's first
// launch loads it, and on an H100 with driver 580 that waited for the device's queued work inside the
// driver, keeping other threads' calls out meanwhile (tests/gpu/hold_blocking.cu). Modeled as a wait
// for the other streams of the function's context (timeline::wait_for_other_streams). EAGER: no wait.
bool lazy_loading() {
  static const bool lazy = [] {
    const char* v = std::getenv("CUDA_MODULE_LOADING");
    return v == nullptr || std::strcmp(v, "EAGER") != 0;
  }();
  return lazy;
}

CUresult load_on_first_launch(Function* function, CUstream stream, bool per_thread) {
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (function->loaded || !lazy_loading()) return CUDA_SUCCESS;
  }
  if (CUresult status = timeline::wait_for_other_streams(stream, per_thread); status != CUDA_SUCCESS) return status;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  function->loaded = true;
  return CUDA_SUCCESS;
}

// The same load made by a call on the function itself (an attribute, its occupancy, cuFuncLoad): no
// stream is named, so it waits for every stream of the function's context. By analogy with the first
// launch (what the GPU's driver does for these calls was not measured apart).
CUresult load_for_use(Function* function) {
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (function->loaded || !lazy_loading()) return CUDA_SUCCESS;
  }
  if (CUresult status = timeline::wait_for_context_streams(function->context); status != CUDA_SUCCESS) return status;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  function->loaded = true;
  return CUDA_SUCCESS;
}

// The function a call on a CUfunction names (a CUkernel cast to one is refused, as by
// cuFuncGetParamInfo), loaded; or on a CUkernel (`kernel` true) in the current context, whose device
// must be `device`.
CUresult function_in_use(const void* handle, bool kernel, int device, Function** out) {
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (kernel) {
      if (r.kernels.count(handle) == 0) return CUDA_ERROR_INVALID_HANDLE;
      if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
      if (CUresult status = find_function(r, static_cast<CUfunction>(const_cast<void*>(handle)), out); status != CUDA_SUCCESS)
        return status;
      if ((*out)->context->device != device) return CUDA_ERROR_INVALID_DEVICE;
    } else {
      auto f = r.functions.find(handle);
      if (f == r.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
      *out = f->second;
    }
  }
  return load_for_use(*out);
}

CUresult get_attribute(Function* function, CUfunction_attribute attribute, int* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = kMaxThreadsPerBlock; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = function->max_dynamic_shared; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = function->carveout; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *value = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// The two attributes a program may set; the others are the binary's.
CUresult set_attribute(Function* function, CUfunction_attribute attribute, int value) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value >= 0 && value <= kMaxDynamicShared) {
    function->max_dynamic_shared = value;
    return CUDA_SUCCESS;
  }
  if (attribute == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT && value >= -1 && value <= 100) {
    function->carveout = value;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// Resident blocks a multiprocessor holds: bounded by threads alone (the catalog's kernels use few
// registers), none when the block or its shared memory is past the function's limits.
CUresult occupancy(int* blocks, CUfunction f, int block_size, size_t dynamic_shared) {
  if (blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* function = nullptr;
  if (CUresult status = function_in_use(f, false, 0, &function); status != CUDA_SUCCESS) return status;
  if (block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const bool fits = block_size <= kMaxThreadsPerBlock &&
                    dynamic_shared <= static_cast<size_t>(std::max(function->max_dynamic_shared, kDefaultDynamicShared));
  *blocks = fits ? std::min(32, kMaxThreadsPerSm / block_size) : 0;
  return CUDA_SUCCESS;
}

CUresult launch(CUfunction f, const Shape& shape, CUstream stream, bool per_thread, void** params, void** extra) {
  Context* stream_ctx = nullptr;
  WorkSpec work;
  Function* function = nullptr;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (CUresult status = find_function(r, f, &function); status != CUDA_SUCCESS) return status;
  }
  if (CUresult status = timeline::stream_context(stream, per_thread, &stream_ctx); status != CUDA_SUCCESS) return status;
  const KernelLaunch l{f, {shape.grid[0], shape.grid[1], shape.grid[2]},
                       {shape.block[0], shape.block[1], shape.block[2]}, shape.shared_bytes, params, extra};
  if (CUresult status = kernel_work(l, stream_ctx, &work); status != CUDA_SUCCESS) return status;
  if (CUresult status = load_on_first_launch(function, stream, per_thread); status != CUDA_SUCCESS) return status;
  return timeline::submit(stream, per_thread, std::move(work));
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, bool per_thread) {
  if (config == nullptr || (config->numAttrs != 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  const Shape shape{{config->gridDimX, config->gridDimY, config->gridDimZ},
                    {config->blockDimX, config->blockDimY, config->blockDimZ},
                    config->sharedMemBytes};
  return launch(f, shape, config->hStream, per_thread, params, extra);
}

CUresult host_func(CUstream stream, CUhostFn fn, void* data, bool per_thread) {
  WorkSpec work;
  if (CUresult r = host_work(fn, data, "host function", &work); r != CUDA_SUCCESS) return r;
  return timeline::submit(stream, per_thread, std::move(work));
}

// The address of a stream memory operation: device memory, or pinned host memory through its device
// pointer, mapped for the device. Checked again when the operation executes.
bool reachable(std::uintptr_t address, std::size_t bytes, bool write) {
  AddressSpace& space = AddressSpace::get();
  const Mapping* m = space.find_mapping(address);
  return m != nullptr && address % bytes == 0 && space.accessible(address, bytes, write);
}

template <typename T>
bool wait_condition(T now, T value, unsigned flags) {
  switch (flags & 0xf) {
    case CU_STREAM_WAIT_VALUE_GEQ:  // signed difference, as the driver compares (wrapping counters)
      return static_cast<std::make_signed_t<T>>(now - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return now == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (now & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return ~(now | value) != 0;
  }
  return false;
}

// The work of a wait on the `T` at `address` (cuStreamWaitValue32/64, a batch's wait): checked as the
// driver checks it when called, the address too.
template <typename T>
CUresult wait_work(CUdeviceptr address, T value, unsigned flags, WorkSpec* out) {
  const unsigned op = flags & 0xf;
  if (op != CU_STREAM_WAIT_VALUE_GEQ && op != CU_STREAM_WAIT_VALUE_EQ && op != CU_STREAM_WAIT_VALUE_AND &&
      op != CU_STREAM_WAIT_VALUE_NOR)
    return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~(0xfu | CU_STREAM_WAIT_VALUE_FLUSH)) != 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::shared_lock lock(AddressSpace::get().mutex);
    if (!reachable(address, sizeof(T), false)) return CUDA_ERROR_INVALID_VALUE;
  }
  WorkSpec& work = *out;
  work.kind = WorkKind::WaitValue;
  work.what = sizeof(T) == 4 ? "cuStreamWaitValue32" : "cuStreamWaitValue64";
  work.address = address;
  // A wait on memory that has gone never completes on a GPU either; here it stays queued, and a
  // synchronize reports it.
  work.current = [address]() -> std::uint64_t {
    if (!reachable(address, sizeof(T), false)) return 0;
    return __atomic_load_n(reinterpret_cast<const T*>(address), __ATOMIC_ACQUIRE);
  };
  work.satisfied = [address, value, flags]() {
    if (!reachable(address, sizeof(T), false)) return false;
    return wait_condition<T>(__atomic_load_n(reinterpret_cast<const T*>(address), __ATOMIC_ACQUIRE), value, flags);
  };
  return CUDA_SUCCESS;
}

// The work of a write of `value` to the `T` at `address` (cuStreamWriteValue32/64, a batch's write).
template <typename T>
CUresult write_work(CUdeviceptr address, T value, unsigned flags, WorkSpec* out) {
  if ((flags & ~static_cast<unsigned>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::shared_lock lock(AddressSpace::get().mutex);
    if (!reachable(address, sizeof(T), true)) return CUDA_ERROR_INVALID_VALUE;
  }
  WorkSpec& work = *out;
  work.kind = WorkKind::WriteValue;
  work.what = sizeof(T) == 4 ? "cuStreamWriteValue32" : "cuStreamWriteValue64";
  work.address = address;
  work.value = value;
  work.effect = [address, value](int, Touches& touches) {
    if (!reachable(address, sizeof(T), true)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    __atomic_store_n(reinterpret_cast<T*>(address), value, __ATOMIC_RELEASE);
    touches.add_range(address, address + sizeof(T));
    return CUDA_SUCCESS;
  };
  return CUDA_SUCCESS;
}

template <typename T>
CUresult wait_value(CUstream stream, CUdeviceptr address, T value, unsigned flags, bool per_thread) {
  WorkSpec work;
  if (CUresult status = wait_work<T>(address, value, flags, &work); status != CUDA_SUCCESS) return status;
  return timeline::submit(stream, per_thread, std::move(work));
}

template <typename T>
CUresult write_value(CUstream stream, CUdeviceptr address, T value, unsigned flags, bool per_thread) {
  WorkSpec work;
  if (CUresult status = write_work<T>(address, value, flags, &work); status != CUDA_SUCCESS) return status;
  return timeline::submit(stream, per_thread, std::move(work));
}

CUresult batch_mem_op(CUstream stream, unsigned count, const CUstreamBatchMemOpParams* ops, unsigned flags,
                      bool per_thread) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<WorkSpec> work;
  if (CUresult status = mem_op_work(count, ops, &work); status != CUDA_SUCCESS) return status;
  return timeline::submit_all(stream, per_thread, std::move(work));
}

constexpr bool kLegacy = false;
constexpr bool kPerThread = true;

}  // namespace

void release_context_modules(const Context* context) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::erase_if(r.functions, [&](const auto& f) { return f.second->context == context; });
  std::erase_if(r.modules, [&](const auto& m) { return !m.second->library && m.second->context == context; });
  for (auto& [handle, module] : r.modules) {
    if (module->library) std::erase_if(module->in_context, [&](const auto& f) { return f.first.second == context; });
  }
}

CUresult host_work(CUhostFn fn, void* data, const char* what, WorkSpec* out) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  out->kind = WorkKind::HostFunc;
  out->what = what;
  out->host_fn = fn;
  out->host_data = data;
  return CUDA_SUCCESS;
}

CUresult mem_op_work(unsigned count, const CUstreamBatchMemOpParams* ops, std::vector<WorkSpec>* out) {
  if (count == 0) return CUDA_SUCCESS;  // even with a null array: measured (H200, driver 580.159.04)
  if (count > driver::kMaxBatchMemOps || ops == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<WorkSpec> work;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    CUresult status = CUDA_SUCCESS;
    WorkSpec w;
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        status = wait_work<std::uint32_t>(op.waitValue.address, op.waitValue.value, op.waitValue.flags, &w);
        break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        status = wait_work<std::uint64_t>(op.waitValue.address, op.waitValue.value64, op.waitValue.flags, &w);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        status = write_work<std::uint32_t>(op.writeValue.address, op.writeValue.value, op.writeValue.flags, &w);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        status = write_work<std::uint64_t>(op.writeValue.address, op.writeValue.value64, op.writeValue.flags, &w);
        break;
      // Nothing to model for these two: the simulator's writes are seen everywhere at once.
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        if (op.flushRemoteWrites.flags != 0) return CUDA_ERROR_INVALID_VALUE;
        continue;
      case CU_STREAM_MEM_OP_BARRIER:
        if (op.memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_SYS &&
            op.memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_GPU)
          return CUDA_ERROR_INVALID_VALUE;
        continue;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (status != CUDA_SUCCESS) return status;
    work.push_back(std::move(w));
  }
  for (WorkSpec& w : work) out->push_back(std::move(w));
  return CUDA_SUCCESS;
}

CUresult kernel_work(const KernelLaunch& l, const Context* context, WorkSpec* out) {
  Function* function = nullptr;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (CUresult status = find_function(r, l.function, &function); status != CUDA_SUCCESS) return status;
  }
  const Shape shape{{l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]}, l.shared_bytes};
  if (CUresult status = check_shape(shape); status != CUDA_SUCCESS) return status;
  if (context != function->context) return CUDA_ERROR_INVALID_HANDLE;  // a function of another context
  std::vector<std::byte> args;
  if (CUresult status = gather_args(function->kernel, l.params, l.extra, &args); status != CUDA_SUCCESS) return status;
  out->kind = WorkKind::Kernel;
  out->what = std::string("kernel ") + function->kernel->name;
  out->effect = [kernel = function->kernel, args = std::move(args)](int device, Touches& touches) {
    DeviceMemory memory(AddressSpace::get(), device, touches);
    return kernel->run(args.data(), memory);
  };
  return CUDA_SUCCESS;
}

CUresult impl::cuModuleLoadData(CUmodule* module, const void* image) {
  return load(reinterpret_cast<void**>(module), image, false);
}
// JIT options are for PTX, which the simulator does not compile: they are ignored.
CUresult impl::cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return load(reinterpret_cast<void**>(module), image, false);
}
CUresult impl::cuModuleUnload(CUmodule hmod) { return unload(hmod, false); }

CUresult impl::cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.modules.find(hmod);
  if (it == r.modules.end() || it->second->library) return CUDA_ERROR_INVALID_HANDLE;
  const KernelInfo* kernel = find_kernel(name);
  if (kernel == nullptr) return CUDA_ERROR_NOT_FOUND;
  Module& m = *it->second;
  auto& slot = m.functions[name];
  if (!slot) {
    slot = std::make_unique<Function>(Function{kernel, m.context, &m});
    r.functions.emplace(slot.get(), slot.get());
  }
  *hfunc = reinterpret_cast<CUfunction>(slot.get());
  return CUDA_SUCCESS;
}

CUresult impl::cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                 CUlibraryOption*, void**, unsigned int) {
  return load(reinterpret_cast<void**>(library), code, true);
}
CUresult impl::cuLibraryUnload(CUlibrary library) { return unload(library, true); }

CUresult impl::cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.modules.find(library);
  if (it == r.modules.end() || !it->second->library) return CUDA_ERROR_INVALID_HANDLE;
  const KernelInfo* kernel = find_kernel(name);
  if (kernel == nullptr) return CUDA_ERROR_NOT_FOUND;
  auto& slot = it->second->kernels[name];
  if (!slot) {
    slot = std::make_unique<LibraryKernel>(LibraryKernel{kernel, it->second.get()});
    r.kernels.emplace(slot.get(), slot.get());
  }
  *pKernel = reinterpret_cast<CUkernel>(slot.get());
  return CUDA_SUCCESS;
}

CUresult impl::cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.kernels.count(kernel) == 0) return CUDA_ERROR_INVALID_HANDLE;
  Function* function = nullptr;
  if (CUresult status = find_function(r, reinterpret_cast<CUfunction>(kernel), &function); status != CUDA_SUCCESS)
    return status;
  *pFunc = reinterpret_cast<CUfunction>(function);
  return CUDA_SUCCESS;
}

// A CUkernel cast to a CUfunction is CUDA_ERROR_INVALID_HANDLE here (measured on an H200, driver 580:
// only cuKernelGetParamInfo answers for a CUkernel), though launches accept one. Answers without
// loading the function: measured on an H200 with driver 580 (tests/gpu/hold_blocking.cu,
// 2026-11-29): asked for a function from cuModuleGetFunction never used, under a hold, the mover's
// calls went on.
CUresult impl::cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto f = r.functions.find(func);
  if (f == r.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  return param_info(f->second->kernel, paramIndex, paramOffset, paramSize);
}

// Under lazy loading loads the kernel in the current context first, where there is one, as the other
// calls on it do (load_for_use). Measured on an H200 with driver 580 (tests/gpu/hold_blocking.cu,
// 2026-11-29): asked for a library's kernel never used while a hold stood, it kept the mover's copy
// out until the flag was written; uvmpool's launch hook asking so had row 7's holds given up.
CUresult impl::cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  Function* function = nullptr;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (r.kernels.count(kernel) == 0) return CUDA_ERROR_INVALID_HANDLE;
    Context* context = nullptr;
    if (current_context(&context) == CUDA_SUCCESS && context != nullptr &&
        find_function(r, reinterpret_cast<CUfunction>(kernel), &function) != CUDA_SUCCESS)
      function = nullptr;
  }
  if (function != nullptr) {
    if (CUresult status = load_for_use(function); status != CUDA_SUCCESS) return status;
  }
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto k = r.kernels.find(kernel);
  if (k == r.kernels.end()) return CUDA_ERROR_INVALID_HANDLE;
  return param_info(k->second->kernel, paramIndex, paramOffset, paramSize);
}

CUresult impl::cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  Function* function = nullptr;
  if (CUresult status = function_in_use(hfunc, false, 0, &function); status != CUDA_SUCCESS) return status;
  return get_attribute(function, attrib, pi);
}

CUresult impl::cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  Function* function = nullptr;
  if (CUresult status = function_in_use(hfunc, false, 0, &function); status != CUDA_SUCCESS) return status;
  return set_attribute(function, attrib, value);
}

CUresult impl::cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  Function* function = nullptr;
  return function_in_use(hfunc, false, 0, &function);  // a preference only: nothing the catalog's kernels use
}

CUresult impl::cuFuncLoad(CUfunction hfunc) {
  Function* function = nullptr;
  return function_in_use(hfunc, false, 0, &function);
}

CUresult impl::cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  Function* function = nullptr;
  if (CUresult status = function_in_use(kernel, true, dev, &function); status != CUDA_SUCCESS) return status;
  return get_attribute(function, attrib, pi);
}

CUresult impl::cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  Function* function = nullptr;
  if (CUresult status = function_in_use(kernel, true, dev, &function); status != CUDA_SUCCESS) return status;
  return set_attribute(function, attrib, val);
}

CUresult impl::cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                           size_t dynamicSMemSize) {
  return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}

CUresult impl::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func, int blockSize,
                                                                    size_t dynamicSMemSize, unsigned int flags) {
  if ((flags & ~static_cast<unsigned>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) != 0) return CUDA_ERROR_INVALID_VALUE;
  return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}

CUresult impl::cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                              unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void** params,
                              void** extra) {
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, s, kLegacy, params, extra);
}
CUresult impl::cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void** params,
                                   void** extra) {
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, s, kPerThread, params, extra);
}
CUresult impl::cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return launch_ex(config, f, params, extra, kLegacy);
}
CUresult impl::cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return launch_ex(config, f, params, extra, kPerThread);
}
// Every grid fits at once on the simulated device, so a cooperative launch is an ordinary one.
CUresult impl::cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                         unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                         CUstream s, void** params) {
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, s, kLegacy, params, nullptr);
}
CUresult impl::cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                              CUstream s, void** params) {
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, s, kPerThread, params, nullptr);
}

CUresult impl::cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) { return host_func(s, fn, data, kLegacy); }
CUresult impl::cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  return host_func(s, fn, data, kPerThread);
}

CUresult impl::cuStreamWaitValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) {
  return wait_value<std::uint32_t>(s, a, v, f, kLegacy);
}
CUresult impl::cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) {
  return wait_value<std::uint32_t>(s, a, v, f, kPerThread);
}
CUresult impl::cuStreamWaitValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) {
  return wait_value<std::uint64_t>(s, a, v, f, kLegacy);
}
CUresult impl::cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) {
  return wait_value<std::uint64_t>(s, a, v, f, kPerThread);
}
CUresult impl::cuStreamWriteValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) {
  return write_value<std::uint32_t>(s, a, v, f, kLegacy);
}
CUresult impl::cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) {
  return write_value<std::uint32_t>(s, a, v, f, kPerThread);
}
CUresult impl::cuStreamWriteValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) {
  return write_value<std::uint64_t>(s, a, v, f, kLegacy);
}
CUresult impl::cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) {
  return write_value<std::uint64_t>(s, a, v, f, kPerThread);
}
CUresult impl::cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int f) {
  return batch_mem_op(s, count, ops, f, kLegacy);
}
CUresult impl::cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                          unsigned int f) {
  return batch_mem_op(s, count, ops, f, kPerThread);
}

}  // namespace uvmpool::sim
