// Names and descriptions of CUresult codes, as cuGetErrorName / cuGetErrorString give them.
#pragma once

#include <optional>
#include <string_view>

#include "driver/driver_api.h"

namespace uvmpool::sim {

// "CUDA_ERROR_OUT_OF_MEMORY" for CUDA_ERROR_OUT_OF_MEMORY; nullptr for a code the driver does not know.
const char* error_name(CUresult code);

// The code named `name` ("CUDA_ERROR_OUT_OF_MEMORY", also without the "CUDA_ERROR_" prefix, or a
// number such as "2"), if any.
std::optional<CUresult> error_from_text(std::string_view name);

}  // namespace uvmpool::sim
