// What a whole process sees: options() stopping on a bad value, warnings printed once, the logger's
// output and destination, and the docs check tool. Each runs a fresh child process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "child_process.h"
#include "config/options.h"

namespace uvmpool::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ChildResult run_config_child(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> argv{UVMPOOL_CONFIG_CHILD};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_child(argv, env);
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(OptionsInProcess, ValidEnvironmentIsParsedAndTheProgramRunsOn) {
  ChildResult r = run_config_child({"options"}, {"UVMPOOL_SIM_DEVICES=4"});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(r.out, "sim_devices=4\n");
  EXPECT_EQ(r.err, "");
}

TEST(OptionsInProcess, MalformedValueExitsWithStatus2AfterItsOneLineMessage) {
  ChildResult r = run_config_child({"options"}, {"UVMPOOL_SIM_DEVICE_MEMORY=12X"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.err, "uvmpool: UVMPOOL_SIM_DEVICE_MEMORY='12X' is not valid: expected a size such as 512M, 4G or 1.5T\n");
  EXPECT_EQ(r.out, "") << "the program must not run on";
}

TEST(OptionsInProcess, EveryMalformedValueIsReportedBeforeExiting) {
  ChildResult r = run_config_child({"options"}, {"UVMPOOL_STATS=2", "UVMPOOL_SIM_DEVICES=0"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_THAT(r.err, HasSubstr("UVMPOOL_STATS='2'"));
  EXPECT_THAT(r.err, HasSubstr("UVMPOOL_SIM_DEVICES='0'"));
}

TEST(OptionsInProcess, UnknownVariableIsNotFatalAndOptionsPrintsNoWarning) {
  ChildResult r = run_config_child({"options"}, {"UVMPOOL_LOG_LEVLE=info"});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.err, "");
}

TEST(ReportWarnings, PrintsEachUnknownVariableOncePerProcess) {
  ChildResult r = run_config_child({"warnings"}, {"UVMPOOL_LOG_LEVLE=info"});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.err, "uvmpool: unknown setting UVMPOOL_LOG_LEVLE (did you mean UVMPOOL_LOG_LEVEL?)\n");
}

TEST(Logger, WritesPrefixedLinesAtOrAboveTheDefaultLevelToStderr) {
  ChildResult r = run_config_child({"log"}, {});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.err, "[uvmpool] warning: at warn 4\n[uvmpool] error: at error 5\n");
}

TEST(Logger, LevelFromTheEnvironmentLetsLessSevereLinesThrough) {
  ChildResult r = run_config_child({"log"}, {"UVMPOOL_LOG_LEVEL=info"});
  EXPECT_EQ(r.err, "[uvmpool] info: at info 3\n[uvmpool] warning: at warn 4\n[uvmpool] error: at error 5\n");
  ChildResult all = run_config_child({"log"}, {"UVMPOOL_LOG_LEVEL=trace"});
  EXPECT_THAT(all.err, HasSubstr("[uvmpool] trace: at trace 1\n[uvmpool] debug: at debug 2\n"));
}

TEST(Logger, LevelOffSuppressesEverything) {
  ChildResult r = run_config_child({"log"}, {"UVMPOOL_LOG_LEVEL=off"});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.err, "");
}

TEST(Logger, ComponentNameReplacesUvmpoolInThePrefix) {
  ChildResult r = run_config_child({"log", "uvmpool-sim"}, {"UVMPOOL_LOG_LEVEL=error"});
  EXPECT_EQ(r.err, "[uvmpool-sim] error: at error 5\n");
}

TEST(Logger, NothingIsLoggedAfterShutdown) {
  ChildResult r = run_config_child({"log"}, {"UVMPOOL_LOG_LEVEL=trace"});
  EXPECT_THAT(r.err, HasSubstr("at error 5"));
  EXPECT_THAT(r.err, Not(HasSubstr("after shutdown")));
}

TEST(LogFile, ReceivesThePrefixedLinesAppendedAndStderrStaysQuiet) {
  const std::string log = temp_path("log");
  write_file(log, "earlier line\n");
  ChildResult r = run_config_child({"log"}, {"UVMPOOL_LOG_FILE=" + log});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(read_whole_file(log), "earlier line\n[uvmpool] warning: at warn 4\n[uvmpool] error: at error 5\n");
  std::remove(log.c_str());
}

TEST(LogFile, LevelOffWritesNothingToTheFile) {
  const std::string log = temp_path("log");
  ChildResult r = run_config_child({"log"}, {"UVMPOOL_LOG_FILE=" + log, "UVMPOOL_LOG_LEVEL=off"});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(read_whole_file(log), "");
  std::remove(log.c_str());
}

TEST(LogFile, ThatCannotBeOpenedFallsBackToStderrWithOneWarning) {
  ChildResult r = run_config_child({"log"}, {"UVMPOOL_LOG_FILE=/dev/null/uvmpool.log"});
  EXPECT_EQ(r.exit_status, 0);
  ASSERT_THAT(r.err, HasSubstr("\n[uvmpool] warning: at warn 4\n[uvmpool] error: at error 5\n"));
  const std::string first_line = r.err.substr(0, r.err.find('\n'));
  EXPECT_THAT(first_line, HasSubstr("[uvmpool] warning: cannot open UVMPOOL_LOG_FILE '/dev/null/uvmpool.log'"));
  EXPECT_THAT(first_line, HasSubstr("logging to stderr"));
}

TEST(LogFile, InAMissingDirectoryIsNotCreated) {
  const std::string dir = temp_path("missing-dir");
  std::remove(dir.c_str());
  ChildResult r = run_config_child({"log"}, {"UVMPOOL_LOG_FILE=" + dir + "/uvmpool.log"});
  EXPECT_THAT(r.err, HasSubstr("cannot open UVMPOOL_LOG_FILE"));
  EXPECT_NE(access(dir.c_str(), F_OK), 0) << dir << " was created";
  rmdir(dir.c_str());
}

// uvmpool-options --check, which keeps docs/configuration.md in step with the table.
std::string doc_with_table(const std::string& table) {
  return "# Settings\n\nSome text.\n\n<!-- options:begin -->\n" + table + "<!-- options:end -->\n\nMore text.\n";
}

TEST(DocCheck, PassesWhenTheMarkedSectionIsTheTable) {
  const std::string doc = temp_path("doc");
  write_file(doc, doc_with_table(config::markdown_table()));
  ChildResult r = run_child({UVMPOOL_OPTIONS_TOOL, "--check", doc}, {});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  std::remove(doc.c_str());
}

TEST(DocCheck, FailsAndShowsTheDifferingLinesWhenTheSectionIsStale) {
  std::string table = config::markdown_table();
  const std::string row_start = "| `UVMPOOL_SIM_DEVICE_MEMORY` | size | `8G`";
  table.replace(table.find(row_start), row_start.size(), "| `UVMPOOL_SIM_DEVICE_MEMORY` | size | `4G`");
  const std::string doc = temp_path("doc");
  write_file(doc, doc_with_table(table));
  ChildResult r = run_child({UVMPOOL_OPTIONS_TOOL, "--check", doc}, {});
  EXPECT_NE(r.exit_status, 0);
  EXPECT_THAT(r.err, HasSubstr("differs"));
  EXPECT_THAT(r.err, HasSubstr("\n-| `UVMPOOL_SIM_DEVICE_MEMORY` | size | `4G`"));
  EXPECT_THAT(r.err, HasSubstr("\n+| `UVMPOOL_SIM_DEVICE_MEMORY` | size | `8G`"));
  EXPECT_THAT(r.err, Not(HasSubstr("UVMPOOL_STATS"))) << "only the differing lines are shown";

  ChildResult update = run_child({UVMPOOL_OPTIONS_TOOL, "--update", doc}, {});
  EXPECT_EQ(update.exit_status, 0);
  EXPECT_EQ(read_whole_file(doc), doc_with_table(config::markdown_table())) << "--update rewrites only the section";
  std::remove(doc.c_str());
}

TEST(DocCheck, FailsWhenTheMarkersAreMissing) {
  const std::string doc = temp_path("doc");
  write_file(doc, config::markdown_table());
  ChildResult r = run_child({UVMPOOL_OPTIONS_TOOL, "--check", doc}, {});
  EXPECT_NE(r.exit_status, 0);
  EXPECT_THAT(r.err, HasSubstr("options:begin"));
  std::remove(doc.c_str());
}

TEST(DocCheck, WithoutArgumentsPrintsTheTable) {
  ChildResult r = run_child({UVMPOOL_OPTIONS_TOOL}, {});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.out, config::markdown_table());
}

}  // namespace
}  // namespace uvmpool::testing
