// Writes the seed corpus of the segment fuzzer (tests/fuzz/segment_corpus/): the sample report of the
// stats tests as the test writer lays out a segment (one device, then two in slots 0 and 3), and
// each cut short after its header. Run once; its output is committed:
//   uvmpool-fuzz-segment-seeds tests/fuzz/segment_corpus
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "sample_report.h"
#include "segment_writer.h"

using namespace uvmpool::stats;

namespace {
std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void save(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string out = argv[1], scratch = out + "/.scratch";
  Report one = test::sample_report();
  Report two = one;
  two.devices.push_back(two.devices[0]);
  two.devices[1].device = 3;
  int n = 0;
  for (auto [report, slots] : {std::pair{one, std::vector<std::uint32_t>{}}, std::pair{two, std::vector<std::uint32_t>{0, 3}}}) {
    std::string bytes;
    {
      test::SegmentWriter w(report, "", 1000, 1, slots, scratch);
      w.publish();
      bytes = bytes_of(scratch);
    }
    ++n;
    save(out + "/segment-" + std::to_string(n), bytes);
    save(out + "/segment-" + std::to_string(n) + "-header-only", bytes.substr(0, sizeof(shm::SegmentHeader)));
  }
  return 0;
}
