#include "sim/kernels.h"

#include <array>
#include <cstring>

#include "sim/sim_control.h"

namespace uvmpool::sim {
namespace {

// A parameter of type T at `offset` of the argument buffer.
template <typename T>
T arg(const std::byte* args, std::size_t offset) {
  T value;
  std::memcpy(&value, args + offset, sizeof(T));
  return value;
}

std::uintptr_t ptr(const std::byte* args, std::size_t offset) { return arg<std::uintptr_t>(args, offset); }

constexpr CUresult kFault = CUDA_ERROR_ILLEGAL_ADDRESS;

CUresult fill_u32(const std::byte* a, DeviceMemory& m) {
  const std::uint64_t count = arg<std::uint64_t>(a, 8);
  if (count == 0) return CUDA_SUCCESS;
  std::uint32_t* dst = m.write<std::uint32_t>(ptr(a, 0), count);
  if (dst == nullptr) return kFault;
  const std::uint32_t value = arg<std::uint32_t>(a, 16);
  for (std::uint64_t i = 0; i < count; ++i) dst[i] = value;
  return CUDA_SUCCESS;
}

CUresult copy(const std::byte* a, DeviceMemory& m) {
  const std::uint64_t bytes = arg<std::uint64_t>(a, 16);
  if (bytes == 0) return CUDA_SUCCESS;
  const auto* src = m.read<std::byte>(ptr(a, 8), bytes);
  auto* dst = src == nullptr ? nullptr : m.write<std::byte>(ptr(a, 0), bytes);
  if (dst == nullptr) return kFault;
  std::memmove(dst, src, bytes);
  return CUDA_SUCCESS;
}

CUresult sum_u32(const std::byte* a, DeviceMemory& m) {
  const std::uint64_t count = arg<std::uint64_t>(a, 8);
  const std::uint32_t* src = count == 0 ? nullptr : m.read<std::uint32_t>(ptr(a, 0), count);
  if (count != 0 && src == nullptr) return kFault;
  std::uint64_t* out = m.write<std::uint64_t>(ptr(a, 16), 1);
  if (out == nullptr) return kFault;
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < count; ++i) sum += src[i];
  *out = sum;
  return CUDA_SUCCESS;
}

// Done once, charged `passes` times: reading has no effect, and writing zeros twice is writing once.
CUresult touch(const std::byte* a, DeviceMemory& m) {
  const std::uint64_t bytes = arg<std::uint64_t>(a, 8);
  const std::uint32_t passes = arg<std::uint32_t>(a, 16);
  if (bytes == 0 || passes == 0) return CUDA_SUCCESS;
  if (arg<std::uint32_t>(a, 20) == 0) return m.read<std::byte>(ptr(a, 0), bytes, passes) ? CUDA_SUCCESS : kFault;
  std::byte* p = m.write<std::byte>(ptr(a, 0), bytes, passes);
  if (p == nullptr) return kFault;
  std::memset(p, 0, bytes);
  return CUDA_SUCCESS;
}

CUresult gather_u32(const std::byte* a, DeviceMemory& m) {
  const std::uint64_t row_count = arg<std::uint64_t>(a, 8);
  const std::uint64_t row_len = arg<std::uint64_t>(a, 16);
  if (row_count == 0 || row_len == 0) return CUDA_SUCCESS;
  if (row_count > UINT64_MAX / row_len) return kFault;
  const std::uintptr_t* rows = m.read<std::uintptr_t>(ptr(a, 0), row_count);
  std::uint32_t* out = rows == nullptr ? nullptr : m.write<std::uint32_t>(ptr(a, 24), row_count * row_len);
  if (out == nullptr) return kFault;
  for (std::uint64_t r = 0; r < row_count; ++r) {
    const std::uint32_t* row = m.read<std::uint32_t>(rows[r], row_len);
    if (row == nullptr) return kFault;
    std::memmove(out + r * row_len, row, row_len * sizeof(std::uint32_t));
  }
  return CUDA_SUCCESS;
}

CUresult struct_fill_u32(const std::byte* a, DeviceMemory& m) {
  const auto fill = arg<UvmpoolSimStructFill>(a, 0);
  if (fill.count == 0) return CUDA_SUCCESS;
  for (std::uint32_t* p : fill.p) {
    if (p == nullptr) continue;
    std::uint32_t* dst = m.write<std::uint32_t>(reinterpret_cast<std::uintptr_t>(p), fill.count);
    if (dst == nullptr) return kFault;
    for (std::uint64_t i = 0; i < fill.count; ++i) dst[i] = fill.value;
  }
  return CUDA_SUCCESS;
}

static_assert(sizeof(UvmpoolSimStructFill) == 48 && alignof(UvmpoolSimStructFill) == 8);

constexpr ParamLayout kPtrU64U32[] = {{0, 8}, {8, 8}, {16, 4}};
constexpr ParamLayout kPtrPtrU64[] = {{0, 8}, {8, 8}, {16, 8}};
constexpr ParamLayout kTouch[] = {{0, 8}, {8, 8}, {16, 4}, {20, 4}};
constexpr ParamLayout kGather[] = {{0, 8}, {8, 8}, {16, 8}, {24, 8}};
constexpr ParamLayout kStruct[] = {{0, 48}};

constexpr std::array kCatalog = {
    KernelInfo{"uvmpool_fill_u32", kPtrU64U32, 24, fill_u32},
    KernelInfo{"uvmpool_copy", kPtrPtrU64, 24, copy},
    KernelInfo{"uvmpool_sum_u32", kPtrPtrU64, 24, sum_u32},
    KernelInfo{"uvmpool_touch", kTouch, 24, touch},
    KernelInfo{"uvmpool_gather_u32", kGather, 32, gather_u32},
    KernelInfo{"uvmpool_struct_fill_u32", kStruct, 48, struct_fill_u32},
};

}  // namespace

const KernelInfo* find_kernel(std::string_view name) {
  for (const KernelInfo& k : kCatalog)
    if (name == k.name) return &k;
  return nullptr;
}

}  // namespace uvmpool::sim
