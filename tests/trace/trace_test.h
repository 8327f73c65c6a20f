// Helpers of the trace tests: temporary files, reading a trace back with nlohmann::json, and the
// checks every trace must pass whatever was recorded.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace uvmpool::trace::testing {

using nlohmann::json;

// A fresh directory under TMPDIR (or /tmp) for the test's files, removed with them at the end
// (kept when UVMPOOL_KEEP_TEST_FILES is set, to look at a failing test's traces).
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    path = std::string(base && *base ? base : "/tmp") + "/uvmpool-trace-XXXXXX";
    if (!mkdtemp(path.data())) ADD_FAILURE() << "mkdtemp " << path << " failed";
  }
  ~TempDir() {
    if (!std::getenv("UVMPOOL_KEEP_TEST_FILES")) std::filesystem::remove_all(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::uint64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000u + static_cast<std::uint64_t>(t.tv_nsec);
}

// The file as a JSON array; fails the test (and returns an empty array) when it is not one.
inline json parse_trace(const std::string& path) {
  const std::string text = read_file(path);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(doc.is_discarded()) << path << " is not valid JSON (" << text.size() << " bytes), ends with: "
                                   << text.substr(text.size() > 200 ? text.size() - 200 : 0);
  EXPECT_TRUE(doc.is_array()) << path << " is not a JSON array";
  return doc.is_array() ? doc : json::array();
}

inline double ts_of(const json& e) { return e.at("ts").get<double>(); }

inline std::vector<json> with_ph(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : doc)
    if (e.value("ph", "") == ph) out.push_back(e);
  return out;
}

inline std::vector<json> named(const json& doc, const std::string& ph, const std::string& name) {
  std::vector<json> out;
  for (const json& e : doc)
    if (e.value("ph", "") == ph && e.value("name", "") == name) out.push_back(e);
  return out;
}

// What every trace must satisfy: each event has ph, ts, pid and tid; the events of one thread
// (metadata aside) come in non-decreasing time; complete events have dur >= 0.
inline void check_well_formed(const json& doc) {
  std::map<std::int64_t, double> last_ts;
  for (const json& e : doc) {
    ASSERT_TRUE(e.is_object());
    for (const char* key : {"ph", "ts", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << "no " << key << ": " << e.dump();
    ASSERT_TRUE(e.at("ts").is_number()) << e.dump();
    if (e.at("ph") == "M") continue;
    const auto tid = e.at("tid").get<std::int64_t>();
    const double ts = ts_of(e);
    if (auto it = last_ts.find(tid); it != last_ts.end()) {
      EXPECT_GE(ts, it->second) << "thread " << tid << " goes back in time at " << e.dump();
    }
    last_ts[tid] = ts;
    if (e.at("ph") == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    }
  }
}

}  // namespace uvmpool::trace::testing
