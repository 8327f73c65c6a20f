// For the programs CTest runs one test at a time under a given environment (tests/sim/CMakeLists.txt
// lists their tests by name): fails when the program holds a test that list lacks, which would
// otherwise never run.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

TEST(Registration, EveryTestOfThisProgramIsRegisteredWithCTest) {
  std::set<std::string> listed;
  std::istringstream names(UVMPOOL_SIM_CTEST_NAMES);
  for (std::string name; std::getline(names, name, ',');) listed.insert(name);
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const std::string name = std::string(suite.name()) + "." + suite.GetTestInfo(t)->name();
      EXPECT_EQ(listed.count(name), 1u) << name << " is missing from tests/sim/CMakeLists.txt";
    }
  }
}
