// cuInit, the driver version and device queries. The devices answer like an H100 SXM (compute
// capability 9.0, 132 SMs) with the memory size of UVMPOOL_SIM_DEVICE_MEMORY; features the sim does
// not provide (GPUDirect RDMA, fabric handles, multicast, compression, dma-buf) are reported absent.
#include "sim/devices.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "sim/address_space.h"
#include "sim/entry_points.h"
#include "sim/profile.h"
#include "sim/settings.h"

namespace uvmpool::sim {
namespace {

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_forked_after_init{false};  // set in a child forked after cuInit (pthread_atfork)

// H100 SXM values where the attribute describes the hardware; the sim's own choices otherwise.
bool attribute_value(CUdevice_attribute attribute, int device, int* value) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; return true;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *value = 65536; return true;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *value = 2147483647; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; return true;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1980000; return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *value = 512; return true;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; return true;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *value = CU_COMPUTEMODE_DEFAULT; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: *value = 131072; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: *value = 131072; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: *value = 65536; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: *value = 16384; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: *value = 16384; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: *value = 16384; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: *value = 2048; return true;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: *value = 512; return true;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x18 + device; return true;  // distinct per device
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = 2619000; return true;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = 5120; return true;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = 52428800; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; return true;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 3; return true;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: *value = 2048; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE: *value = 8192; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: *value = 8192; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *value = 32; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: *value = 2046; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH: *value = 131072; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT: *value = 65536; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH: *value = 16384; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT: *value = 16384; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH: *value = 16384; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: *value = 2048; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: *value = 2048; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: *value = 2046; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: *value = 268435456; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: *value = 131072; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: *value = 65000; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: *value = 2097120; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: *value = 32768; return true;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *value = 233472; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *value = 65536; return true;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: *value = device; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: *value = 2; return true;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = 232448; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *value = 32; return true;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: *value = 0; return true;  // not simulated
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: *value = 32505856; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: *value = 134213632; return true;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *value = 1024; return true;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      *value = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      return true;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: *value = 0; return true;  // not simulated
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: *value = 4; return true;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: *value = CU_DEVICE_NUMA_CONFIG_NONE; return true;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: *value = -1; return true;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: *value = 0x233010de; return true;  // H100 SXM5, NVIDIA
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: *value = 0x16c110de; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: *value = 0; return true;
    default: return false;
  }
}

}  // namespace

bool initialized() { return g_initialized.load(std::memory_order_acquire); }

bool forked_after_init() { return g_forked_after_init.load(std::memory_order_relaxed); }

int device_count() { return settings().devices; }

bool valid_device(int ordinal) { return ordinal >= 0 && ordinal < device_count(); }

CUresult impl::cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (device_count() == 0) return CUDA_ERROR_NO_DEVICE;
  if (!AddressSpace::create()) return CUDA_ERROR_OPERATING_SYSTEM;
  profile::arm();  // the report at exit, if UVMPOOL_SIM_PROFILE asks for one
  static std::once_flag fork_watch;
  std::call_once(fork_watch, [] {
    pthread_atfork(nullptr, nullptr, [] {
      if (g_initialized.load(std::memory_order_relaxed)) g_forked_after_init.store(true, std::memory_order_relaxed);
    });
  });
  g_initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult impl::cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGet(CUdevice_v1* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetName(char* name, int len, CUdevice_v1 dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // Truncated to len - 1 characters and always terminated, as the real driver does.
  std::snprintf(name, static_cast<std::size_t>(len), "uvmpool simulated device %d", dev);
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetUuid(CUuuid* uuid, CUdevice_v1 dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // Fixed per ordinal, so runs are reproducible: "uvmpool-sim" then the ordinal in the last byte.
  static constexpr char kPrefix[] = "uvmpool-sim";
  std::memset(uuid->bytes, 0, sizeof(uuid->bytes));
  std::memcpy(uuid->bytes, kPrefix, sizeof(kPrefix) - 1);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

// The _v2 differs from the v1 only for MIG instances, which the sim does not have.
CUresult impl::cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice_v1 dev) { return impl::cuDeviceGetUuid(uuid, dev); }

CUresult impl::cuDeviceTotalMem_v2(size_t* bytes, CUdevice_v1 dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = settings().device_memory;
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice_v1 dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  int value = 0;
  if (!attribute_value(attrib, dev, &value)) return CUDA_ERROR_INVALID_VALUE;
  *pi = value;
  return CUDA_SUCCESS;
}

}  // namespace uvmpool::sim
