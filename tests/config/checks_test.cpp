// UVMPOOL_CHECK (src/config/checks.h), in a build that compiles the checks in: a failed check names
// what broke and aborts; a passing one does nothing.
#include <gtest/gtest.h>

#include "config/checks.h"

namespace {

int evaluated = 0;
bool counted(bool value) {
  ++evaluated;
  return value;
}

TEST(Checks, AFailedCheckSaysWhatBrokeAndAborts) {
  EXPECT_DEATH(UVMPOOL_CHECK(counted(false), "the free pieces and their count agree"),
               "internal check failed at .*checks_test.cpp:[0-9]+: the free pieces and their count agree");
}

TEST(Checks, APassingCheckIsEvaluatedOnceAndGoesOn) {
  evaluated = 0;
  UVMPOOL_CHECK(counted(true), "true");
  EXPECT_EQ(evaluated, 1);
}

}  // namespace
