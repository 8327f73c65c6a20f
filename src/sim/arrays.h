// CUDA arrays, as far as a copy between an array and device memory needs them (cuMemcpyDtoA /
// cuMemcpyAtoD, which uvmpool hooks as touches of their device side; copies.cpp). An array's storage
// is device memory of its context, laid out linearly: the real layout is opaque and no call of the
// simulator tells them apart. Strided copies with an array side stay refused (strided_copies.cpp).
#pragma once

#include <cstddef>

#include "driver/driver_api.h"

namespace uvmpool::sim {

// Where [offset, offset + bytes) of `array` lies, into *at. CUDA_ERROR_INVALID_HANDLE for an array the
// simulator did not make (or destroyed, or whose context is gone), CUDA_ERROR_INVALID_VALUE for a
// range past its end.
CUresult array_range(CUarray array, std::size_t offset, std::size_t bytes, CUdeviceptr* at);

}  // namespace uvmpool::sim
