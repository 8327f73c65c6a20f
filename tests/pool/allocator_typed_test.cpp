// Behaviours every allocator shares, written once and run for the driver's cuMemAlloc (the
// reference) and for each form of the pool (see allocators.h).
#include <random>

#include "allocators.h"

namespace pooltest {
namespace {

template <typename Impl>
class Allocator : public PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    impl.start();
  }
  void TearDown() override {
    if (Pool* pool = impl.pool()) {
      EXPECT_EQ(pool->stats(0).live_allocations, 0u) << "the test left allocations live in the pool";
      EXPECT_EQ(pool->check_invariants(), "");
    }
    impl.stop();
    PoolTest::TearDown();
  }

  // Sizes from 1 byte to several chunks, around every boundary the pool has (slot sizes, the small
  // limit of 1 MiB, the chunk), including non-multiples of the chunk.
  std::vector<std::size_t> sizes() const {
    return {1,       2,         7,         255,           256,           257,         1000,
            4095,    4096,      4097,      65536 + 3,     kMiB - 1,      kMiB,        kMiB + 1,
            gran - 1, gran,     gran + 1,  2 * gran + 12345, 5 * gran,   5 * gran + 7};
  }

  Impl impl;
};

TYPED_TEST_SUITE(Allocator, AllAllocators);

TYPED_TEST(Allocator, ZeroBytesIsInvalidValue) {
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, this->impl.allocate(&p, 0));
}

TYPED_TEST(Allocator, AllocationsAreAlignedToAtLeast256Bytes) {
  std::vector<CUdeviceptr> live;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t bytes : this->sizes()) {
      CUdeviceptr p = 0;
      ASSERT_CU(this->impl.allocate(&p, bytes)) << " (" << bytes << " bytes)";
      EXPECT_EQ(p % 256, 0u) << bytes << " bytes at 0x" << std::hex << p;
      live.push_back(p);
    }
  }
  for (CUdeviceptr p : live) EXPECT_CU(this->impl.deallocate(p));
}

TYPED_TEST(Allocator, EveryByteReadsBackFromOneByteToSeveralChunks) {
  std::vector<Block> live;
  std::uint64_t seed = 1;
  for (std::size_t bytes : this->sizes()) {
    CUdeviceptr p = 0;
    ASSERT_CU(this->impl.allocate(&p, bytes)) << " (" << bytes << " bytes)";
    fill(p, bytes, seed);
    EXPECT_TRUE(holds(p, bytes, seed));
    live.push_back({p, bytes, seed++});
  }
  // All of them at once: none was written over by a later one.
  for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.seed)) << b.bytes << " bytes";
  for (const Block& b : live) EXPECT_CU(this->impl.deallocate(b.p));
}

TYPED_TEST(Allocator, LiveAllocationsOfMixedSizesNeverOverlap) {
  std::mt19937_64 rng(42);
  std::vector<Block> live;
  for (int i = 0; i < 300; ++i) {
    const int kind = static_cast<int>(rng() % 10);
    std::size_t bytes = kind < 6   ? 1 + rng() % 4096
                        : kind < 9 ? 4096 + rng() % (kMiB + kMiB / 2)
                                   : this->gran / 2 + rng() % (3 * this->gran);
    CUdeviceptr p = 0;
    ASSERT_CU(this->impl.allocate(&p, bytes)) << " (" << bytes << " bytes)";
    fill(p, bytes, i + 100);
    live.push_back({p, bytes, static_cast<std::uint64_t>(i + 100)});
  }
  EXPECT_TRUE(disjoint(live));
  for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  for (const Block& b : live) EXPECT_CU(this->impl.deallocate(b.p));
}

TYPED_TEST(Allocator, FreedMemoryCanBeAllocatedAgain) {
  for (int round = 0; round < 4; ++round) {
    std::vector<Block> live;
    for (std::size_t bytes : this->sizes()) {
      CUdeviceptr p = 0;
      ASSERT_CU(this->impl.allocate(&p, bytes)) << " (round " << round << ", " << bytes << " bytes)";
      fill(p, bytes, round * 1000 + bytes);
      live.push_back({p, bytes, round * 1000 + bytes});
    }
    EXPECT_TRUE(disjoint(live));
    for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
    for (const Block& b : live) ASSERT_CU(this->impl.deallocate(b.p));
  }
}

TYPED_TEST(Allocator, FreeingSomeLeavesTheOthersIntactAndTheirRoomReusable) {
  std::vector<Block> live;
  std::uint64_t seed = 7;
  for (int i = 0; i < 3; ++i)
    for (std::size_t bytes : this->sizes()) {
      CUdeviceptr p = 0;
      ASSERT_CU(this->impl.allocate(&p, bytes));
      fill(p, bytes, seed);
      live.push_back({p, bytes, seed++});
    }
  std::vector<Block> kept;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i % 2 == 0) {
      ASSERT_CU(this->impl.deallocate(live[i].p));
    } else {
      kept.push_back(live[i]);
    }
  }
  for (const Block& b : kept) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  for (std::size_t bytes : this->sizes()) {
    CUdeviceptr p = 0;
    ASSERT_CU(this->impl.allocate(&p, bytes));
    fill(p, bytes, seed);
    kept.push_back({p, bytes, seed++});
  }
  EXPECT_TRUE(disjoint(kept));
  for (const Block& b : kept) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  for (const Block& b : kept) EXPECT_CU(this->impl.deallocate(b.p));
}

TYPED_TEST(Allocator, AddressRangeOfAnyInteriorPointerIsTheWholeAllocationAsAskedFor) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{300}, std::size_t{65536 + 3}, kMiB + 1, this->gran + 5,
                            3 * this->gran + 1}) {
    CUdeviceptr p = 0;
    ASSERT_CU(this->impl.allocate(&p, bytes));
    for (std::size_t offset : {std::size_t{0}, bytes / 2, bytes - 1, std::min(bytes - 1, this->gran)}) {
      CUdeviceptr base = 0;
      std::size_t size = 0;
      ASSERT_CU(this->impl.range(p + offset, &base, &size)) << " (offset " << offset << " of " << bytes << ")";
      EXPECT_EQ(base, p) << "offset " << offset << " of " << bytes;
      EXPECT_EQ(size, bytes) << "offset " << offset << " of " << bytes;
    }
    EXPECT_CU(this->impl.deallocate(p));
  }
}

TYPED_TEST(Allocator, AThousandSmallAllocationsAreDistinctAndAligned) {
  std::vector<Block> live;
  for (int i = 0; i < 1000; ++i) {
    CUdeviceptr p = 0;
    ASSERT_CU(this->impl.allocate(&p, 256));
    EXPECT_EQ(p % 256, 0u);
    fill(p, 256, i);
    live.push_back({p, 256, static_cast<std::uint64_t>(i)});
  }
  EXPECT_TRUE(disjoint(live));
  for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  for (const Block& b : live) EXPECT_CU(this->impl.deallocate(b.p));
}

}  // namespace
}  // namespace pooltest
