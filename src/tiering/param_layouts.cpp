#include "tiering/param_layouts.h"

#include <array>
#include <memory>

namespace uvmpool::tiering {
namespace {

// One direct-mapped table per thread, in front of the shared one: a launch finds its function with
// a few loads and no lock. An entry is good only for the table and generation that filled it.
struct CachedLayout {
  const ParamLayouts* owner = nullptr;
  std::uint64_t generation = 0;
  CUfunction function = nullptr;
  const ParamLayout* layout = nullptr;
};
constexpr std::size_t kThreadSlots = 256;
using ThreadTable = std::array<CachedLayout, kThreadSlots>;
// On the heap, one pointer of TLS: the library's whole TLS block comes from glibc's small static TLS
// surplus when it is dlopened (src/trace/rings.cpp says why), and 8 KiB there makes dlopen fail.
thread_local std::unique_ptr<ThreadTable> t_layouts;

ThreadTable& thread_table() {
  if (!t_layouts) t_layouts = std::make_unique<ThreadTable>();
  return *t_layouts;
}

std::size_t slot_of(CUfunction f) {
  const auto v = reinterpret_cast<std::uintptr_t>(f);
  return (v >> 4 ^ v >> 12) % kThreadSlots;
}

std::atomic<std::uint64_t> g_next_generation{1};

}  // namespace

ParamLayouts::ParamLayouts(const driver::Table& driver)
    : driver_(driver), generation_(g_next_generation.fetch_add(1, std::memory_order_relaxed)) {}

ParamLayouts::~ParamLayouts() {
  MutexLock lock(mu_);
  for (const auto& [f, layout] : known_) delete layout;
  for (const ParamLayout* layout : retired_) delete layout;
}

const ParamLayout* ParamLayouts::kept(CUfunction f) {
  const std::uint64_t generation = generation_.load(std::memory_order_acquire);
  CachedLayout& slot = thread_table()[slot_of(f)];
  if (slot.owner == this && slot.function == f && slot.generation == generation) return slot.layout;
  const ParamLayout* layout = nullptr;
  {
    MutexLock lock(mu_);
    if (auto it = known_.find(f); it != known_.end()) layout = it->second;
  }
  if (layout != nullptr) slot = {this, generation, f, layout};
  return layout;
}

const ParamLayout* ParamLayouts::find(CUfunction f) {
  if (const ParamLayout* layout = kept(f)) return layout;
  const std::uint64_t generation = generation_.load(std::memory_order_acquire);
  // Asked outside the lock: other launches go on meanwhile. Two threads meeting the same new
  // function both ask; the first answer stays.
  const ParamLayout* asked = ask_driver(f);
  const ParamLayout* layout = nullptr;
  {
    MutexLock lock(mu_);
    auto [it, inserted] = known_.emplace(f, asked);
    if (!inserted) retired_.push_back(asked);
    layout = it->second;
  }
  thread_table()[slot_of(f)] = {this, generation, f, layout};
  return layout;
}

void ParamLayouts::forget_all() {
  MutexLock lock(mu_);
  for (const auto& [f, layout] : known_) retired_.push_back(layout);
  known_.clear();
  generation_.store(g_next_generation.fetch_add(1, std::memory_order_relaxed), std::memory_order_release);
}

const ParamLayout* ParamLayouts::ask_driver(CUfunction f) {
  queries_.fetch_add(1, std::memory_order_relaxed);
  auto* layout = new ParamLayout;
  // A CUkernel cast to a CUfunction is refused by cuFuncGetParamInfo with INVALID_HANDLE (measured on
  // an H200, driver 580); only cuKernelGetParamInfo answers for it.
  const auto ask = [&](std::size_t i, std::size_t* offset, std::size_t* size) {
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (driver_.cuFuncGetParamInfo != nullptr) r = driver_.cuFuncGetParamInfo(f, i, offset, size);
    if (r == CUDA_ERROR_INVALID_HANDLE && driver_.cuKernelGetParamInfo != nullptr)
      r = driver_.cuKernelGetParamInfo(reinterpret_cast<CUkernel>(f), i, offset, size);
    return r;
  };
  for (std::size_t i = 0; i < kMaxParams; ++i) {
    std::size_t offset = 0, size = 0;
    const CUresult r = ask(i, &offset, &size);
    if (r == CUDA_SUCCESS) {
      layout->params.push_back({static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(size)});
      continue;
    }
    // Past the last parameter the driver answers INVALID_VALUE; anything else (an unknown handle, no
    // such call) leaves the layout unknown.
    layout->known = r == CUDA_ERROR_INVALID_VALUE;
    break;
  }
  if (!layout->known) layout->params.clear();
  return layout;
}

}  // namespace uvmpool::tiering
