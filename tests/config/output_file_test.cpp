// open_output_file: the one way uvmpool opens UVMPOOL_TRACE, UVMPOOL_STATS_FILE and UVMPOOL_LOG_FILE
// (issue 17: each followed a planted symbolic link, so a root run overwrote root-only files).
#include "config/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace uvmpool::config {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "uvmpool-output-file-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override { fs::remove_all(dir); }

  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  static void put(int fd, const std::string& text) {
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
  }

  fs::path dir;
  std::string error;
};

TEST_F(OutputFile, ANewFileIsCreatedForTheOwnerOnly) {
  const fs::path p = dir / "new.json";
  umask(0);  // whatever the umask, 0600
  const int fd = open_output_file(p, OutputMode::Truncate, error);
  umask(022);
  ASSERT_GE(fd, 0) << error;
  put(fd, "x");
  struct stat st {};
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(OutputFile, TheOwnersExistingFileIsTruncatedOrAppendedTo) {
  const fs::path p = dir / "mine";
  write(p, "old\n");
  int fd = open_output_file(p, OutputMode::Append, error);
  ASSERT_GE(fd, 0) << error;
  put(fd, "more\n");
  EXPECT_EQ(read(p), "old\nmore\n");
  fd = open_output_file(p, OutputMode::Truncate, error);
  ASSERT_GE(fd, 0) << error;
  put(fd, "new\n");
  EXPECT_EQ(read(p), "new\n");
}

TEST_F(OutputFile, APlantedSymbolicLinkIsRefusedAndItsTargetUntouched) {
  const fs::path victim = dir / "victim";
  write(victim, "precious");
  for (OutputMode mode : {OutputMode::Truncate, OutputMode::Append}) {
    const fs::path link = dir / "link";
    fs::remove(link);
    fs::create_symlink(victim, link);
    EXPECT_EQ(open_output_file(link, mode, error), -1);
    EXPECT_THAT(error, HasSubstr("symbolic link"));
    // A dangling link too: following it would create the file it names.
    fs::remove(link);
    fs::create_symlink(dir / "not-yet", link);
    EXPECT_EQ(open_output_file(link, mode, error), -1);
    EXPECT_FALSE(fs::exists(dir / "not-yet"));
  }
  EXPECT_EQ(read(victim), "precious");
}

TEST_F(OutputFile, AHardLinkToAnotherFileIsRefused) {
  const fs::path victim = dir / "victim";
  write(victim, "precious");
  fs::create_hard_link(victim, dir / "hard");
  EXPECT_EQ(open_output_file(dir / "hard", OutputMode::Truncate, error), -1);
  EXPECT_THAT(error, HasSubstr("hard links"));
  EXPECT_EQ(read(victim), "precious");
}

TEST_F(OutputFile, AFifoIsRefusedWithoutHanging) {
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(open_output_file(fifo, OutputMode::Append, error), -1);
}

TEST_F(OutputFile, AnotherUsersFileIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  const fs::path theirs = dir / "theirs";
  write(theirs, "theirs");
  ASSERT_EQ(chown(theirs.c_str(), 12345, 12345), 0);
  EXPECT_EQ(open_output_file(theirs, OutputMode::Truncate, error), -1);
  EXPECT_THAT(error, HasSubstr("another user"));
  EXPECT_EQ(read(theirs), "theirs");
}

}  // namespace
}  // namespace uvmpool::config
