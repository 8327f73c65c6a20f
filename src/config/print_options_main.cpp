// uvmpool-options: prints the settings table as Markdown, or checks/updates the copy that
// docs/configuration.md embeds between its marker comments, so the docs cannot drift from options.def.
// For other languages (the Python package), it also prints the table as JSON and validates settings
// with the library's own parser, so nothing outside C++ repeats the table or its rules.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/limits.h"
#include "config/options.h"

namespace {

constexpr std::string_view kBegin = "<!-- options:begin -->\n";
constexpr std::string_view kEnd = "<!-- options:end -->";

struct Section {
  std::size_t begin = 0, end = 0;  // the text between the markers is [begin, end)
  bool found = false;
};

Section find_section(const std::string& text) {
  Section s;
  const std::size_t begin = text.find(kBegin);
  if (begin == std::string::npos) return s;
  s.begin = begin + kBegin.size();
  s.end = text.find(kEnd, s.begin);
  s.found = s.end != std::string::npos;
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A unified-diff-like listing (longest common subsequence): '-' lines only in the file, '+' lines
// only in the table. The table has a dozen lines, so the quadratic method is plenty.
void print_diff(const std::vector<std::string>& file, const std::vector<std::string>& table) {
  const std::size_t n = file.size(), m = table.size();
  std::vector<std::vector<std::size_t>> common(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t j = m; j-- > 0;) {
      common[i][j] = file[i] == table[j] ? common[i + 1][j + 1] + 1 : std::max(common[i + 1][j], common[i][j + 1]);
    }
  }
  std::size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && file[i] == table[j]) {
      ++i, ++j;
    } else if (j == m || (i < n && common[i + 1][j] >= common[i][j + 1])) {
      std::cerr << "-" << file[i++] << "\n";
    } else {
      std::cerr << "+" << table[j++] << "\n";
    }
  }
}

bool read_file(const char* path, std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  text = buffer.str();
  return true;
}

int check_or_update(const char* path, bool update) {
  std::string text;
  if (!read_file(path, text)) {
    std::cerr << path << ": cannot read\n";
    return 1;
  }
  const Section section = find_section(text);
  if (!section.found) {
    std::cerr << path << ": no '" << kBegin.substr(0, kBegin.size() - 1) << "' ... '" << kEnd << "' section\n";
    return 1;
  }
  const std::string table = uvmpool::config::markdown_table();
  if (text.compare(section.begin, section.end - section.begin, table) == 0) return 0;
  if (update) {
    text.replace(section.begin, section.end - section.begin, table);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    return out ? 0 : 1;
  }
  std::cerr << path << ": the settings table differs from src/config/options.def "
            << "(- in the file, + in the table); run uvmpool-options --update " << path << "\n";
  print_diff(lines_of(text.substr(section.begin, section.end - section.begin)), lines_of(table));
  return 1;
}

int print_json() {
  nlohmann::json table = nlohmann::json::array();
  for (std::size_t i = 0; i < uvmpool::config::kOptionCount; ++i) {
    const uvmpool::config::OptionInfo& o = uvmpool::config::kOptionTable[i];
    table.push_back({{"name", o.name}, {"type", std::string(uvmpool::config::type_name(o.type))}, {"default", o.default_value}, {"help", o.help},
                     {"accepted", std::string(uvmpool::config::expected_form(o))}});
  }
  std::cout << table.dump(1) << "\n";
  return 0;
}

// NAME=VALUE arguments through the library's parser: {"errors": [...], "unknown": [...]} with the
// library's own lines; status 0 only when every setting is known and valid.
int validate(int argc, char** argv) {
  uvmpool::config::Environment env;
  nlohmann::json result = {{"errors", nlohmann::json::array()}, {"unknown", nlohmann::json::array()}};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::size_t eq = arg.find('=');
    if (eq == std::string::npos || !arg.starts_with("UVMPOOL_")) {
      result["errors"].push_back("'" + arg + "' is not UVMPOOL_NAME=VALUE");
      continue;
    }
    env.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
  }
  const uvmpool::config::ParseResult parsed = uvmpool::config::parse(env);
  for (const std::string& e : parsed.errors) result["errors"].push_back(e);
  for (const std::string& w : parsed.warnings) result["unknown"].push_back(w);
  std::cout << result.dump() << "\n";
  return result["errors"].empty() && result["unknown"].empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view command = argc > 1 ? argv[1] : "";
  if (argc == 1) {
    std::cout << uvmpool::config::markdown_table();
    return 0;
  }
  if (argc == 3 && (command == "--check" || command == "--update")) return check_or_update(argv[2], command == "--update");
  if (argc == 2 && command == "--json") return print_json();
  if (command == "--validate") return validate(argc, argv);
  std::cerr << "usage: uvmpool-options                 print the settings table as Markdown\n"
               "       uvmpool-options --check FILE    fail if FILE's table (between the markers) differs\n"
               "       uvmpool-options --update FILE   rewrite FILE's table from the settings\n"
               "       uvmpool-options --json          print the settings table as JSON\n"
               "       uvmpool-options --validate UVMPOOL_NAME=VALUE...\n"
               "                                       check settings as the library would; JSON of the errors\n"
               "                                       and unknown names, status 1 when there are any\n";
  return command == "--help" ? 0 : 2;
}
