#include "carved_replay.h"

#include <vector>

namespace uvmpool::bench {

// Extents made on demand and kept once given back: the device pool's free extents, without a budget.
class CarvedReplay::Extents : public pool::CarvedRange::Source {
 public:
  Extents(const pool::Vmm& vmm, std::size_t extent) : vmm_(vmm), extent_(extent) {}
  ~Extents() override {
    for (const pool::Chunk& c : spare_) vmm_.release_chunks({&c.handle, 1});
  }
  CUresult take(std::size_t granules, std::vector<pool::Chunk>* pieces) override {
    if (!spare_.empty()) {
      pieces->push_back(spare_.back());
      spare_.pop_back();
      return CUDA_SUCCESS;
    }
    pool::Handle h = 0;
    if (const CUresult r = vmm_.create_chunks({&h, 1}, extent_); r != CUDA_SUCCESS) return r;
    ++made;
    pieces->push_back(pool::Chunk{h, pool::Tier::Device, static_cast<std::uint32_t>(granules)});
    return CUDA_SUCCESS;
  }
  void give_back(std::span<const pool::Chunk> pieces) override { spare_.insert(spare_.end(), pieces.begin(), pieces.end()); }
  void before_unmap() override {}  // the replay launches no work
  void mapped(CUdeviceptr, std::span<const pool::Chunk>) override {}
  void unmapped(CUdeviceptr, std::span<const pool::Chunk>) override {}
  std::uint64_t made = 0;

 private:
  const pool::Vmm& vmm_;
  const std::size_t extent_;
  std::vector<pool::Chunk> spare_;
};

CarvedReplay::CarvedReplay(const driver::Table& driver, int device, std::uint64_t bytes, std::size_t extent)
    : vmm_(driver, device), extents_(std::make_unique<Extents>(vmm_, extent)), extent_(extent), bytes_(bytes / extent * extent) {
  const std::size_t chunk = vmm_.granularity();
  if (chunk == 0 || extent % chunk != 0 || vmm_.reserve(&base_, bytes_, extent) != CUDA_SUCCESS) {
    base_ = 0;
    bytes_ = 0;  // every allocation then fails, and the replay says so
  }
  range_.emplace(vmm_, *extents_, base_, bytes_, extent, chunk == 0 ? extent : chunk, kUnit);
}

CarvedReplay::~CarvedReplay() {
  range_.reset();
  extents_.reset();
  if (base_ != 0) vmm_.free_reservation(base_, bytes_);
}

CUresult CarvedReplay::allocate(CUdeviceptr* out, std::size_t bytes) { return range_->allocate(bytes, out); }

void CarvedReplay::deallocate(CUdeviceptr p) { (void)range_->free(p); }

std::uint64_t CarvedReplay::peak_reserved() const { return range_->figures().peak_slots_mapped * extent_; }

std::uint64_t CarvedReplay::extents_made() const { return extents_->made; }

}  // namespace uvmpool::bench
