// Each pool test program runs on its own simulated machine: the UVMPOOL_SIM_* settings its
// CMakeLists.txt gives are pinned here, before the first driver call reads them, so a program
// behaves the same under CTest and by hand. UVMPOOL_DRIVER_PATH (set by CTest) defaults to the
// simulator of this build.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
  std::istringstream settings(UVMPOOL_POOL_TEST_SETTINGS);  // "NAME=VALUE,NAME=VALUE"
  for (std::string item; std::getline(settings, item, ',');) {
    const auto eq = item.find('=');
    if (eq != std::string::npos) setenv(item.substr(0, eq).c_str(), item.substr(eq + 1).c_str(), 1);
  }
  setenv("UVMPOOL_DRIVER_PATH", UVMPOOL_POOL_TEST_DRIVER, 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
