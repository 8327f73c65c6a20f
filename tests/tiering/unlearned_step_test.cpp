// The warning said when tiering does not learn the program's step (src/tiering/unlearned_step.h). That
// it is said, once, and only when no period is held: the CTests
// tiering_bench_warns_when_frees_keep_the_step_from_being_learned and
// tiering_bench_learning_the_step_says_nothing (tests/benchmarks/CMakeLists.txt).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tiering/unlearned_step.h"

namespace uvmpool::tiering {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(UnlearnedStep, SaysHowManyLaunchesWentByAndWhereToRead) {
  const std::string s = unlearned_step_warning(16384, false, nullptr, nullptr);
  EXPECT_THAT(s, AllOf(HasSubstr("learned in 16384 launches"), HasSubstr("read in place"), HasSubstr("Frees that reach the pool"),
                       Not(HasSubstr("is set"))));
}

TEST(UnlearnedStep, SaysWhenTheStepLearnedWasDropped) {
  EXPECT_THAT(unlearned_step_warning(4096, true, nullptr, nullptr),
              HasSubstr("no repeating launch sequence held (the one learned was dropped) for the last 4096 launches"));
}

TEST(UnlearnedStep, NamesPyTorchsAsyncBackendWhenSet) {
  EXPECT_THAT(unlearned_step_warning(1, false, "expandable_segments:False,backend:cudaMallocAsync", nullptr),
              HasSubstr("(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False,backend:cudaMallocAsync is set)"));
  // Another allocator setting is not the cause.
  EXPECT_THAT(unlearned_step_warning(1, false, "expandable_segments:True", nullptr), Not(HasSubstr("is set")));
}

TEST(UnlearnedStep, NamesPyTorchsCacheTurnedOffWhenSet) {
  EXPECT_THAT(unlearned_step_warning(1, false, nullptr, "1"), HasSubstr("(PYTORCH_NO_CUDA_MEMORY_CACHING=1 is set)"));
  EXPECT_THAT(unlearned_step_warning(1, false, nullptr, "0"), Not(HasSubstr("is set")));
  EXPECT_THAT(unlearned_step_warning(1, false, nullptr, ""), Not(HasSubstr("is set")));
}

}  // namespace
}  // namespace uvmpool::tiering
