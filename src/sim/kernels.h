// The simulator's kernel catalog (documented in sim_control.h): each kernel's name, its parameters'
// layout as cuFuncGetParamInfo answers it, and what it does to memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "driver/driver_api.h"
#include "sim/device_memory.h"

namespace uvmpool::sim {

struct ParamLayout {
  std::size_t offset;
  std::size_t size;
};

struct KernelInfo {
  const char* name;
  std::span<const ParamLayout> params;
  std::size_t param_bytes;  // the argument buffer: the end of the last parameter, 8-aligned
  // Runs the kernel on its argument buffer; CUDA_ERROR_ILLEGAL_ADDRESS where it met memory its device
  // cannot reach (it stops there, as a faulting kernel would, having done part of its work).
  CUresult (*run)(const std::byte* args, DeviceMemory& memory);
};

// The kernel of that name, or nullptr.
const KernelInfo* find_kernel(std::string_view name);

}  // namespace uvmpool::sim
