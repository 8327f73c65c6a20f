// libFuzzer target: the reader of statistics segments (src/stats/shm_reader.cpp), which uvmpool-stat
// runs on files in /dev/shm that any process may have written. The input is written to a file, which
// is then inspected and read as a segment, and a report read from it is formatted every way. Nothing
// may crash, hang or read out of bounds. Seeds: tests/fuzz/segment_corpus/ (segments as the test
// writer of tests/stats lays them out, whole and cut short).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "stats/format.h"
#include "stats/shm_reader.h"

using namespace uvmpool::stats;

namespace {
std::string scratch_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/uvmpool-fuzz-segment-" +
         std::to_string(getpid());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = scratch_path();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  close(fd);
  (void)inspect_segment(path);
  Report r;
  std::string error;
  if (read_segment(path, &r, &error)) {
    (void)format_table(r);
    (void)to_json(r);
    (void)to_prometheus({r});
  }
  unlink(path.c_str());
  return 0;
}
