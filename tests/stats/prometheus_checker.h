// A checker of the Prometheus text exposition format 0.0.4, line by line, strict where the format is:
// metric and label names, label value escapes (\\ \" \n only), values, at most one HELP and TYPE per
// name and before its samples, every family's samples together, no series twice, a final newline.
#pragma once

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace uvmpool::stats::test {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

struct PromText {
  std::map<std::string, std::string> types, help;
  std::vector<PromSample> samples;
};

namespace detail {

inline bool name_char(char c, bool first, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
         (!first && c >= '0' && c <= '9');
}

// Reads a name at `pos`; empty when there is none.
inline std::string read_name(const std::string& line, std::size_t& pos, bool colon) {
  const std::size_t start = pos;
  while (pos < line.size() && name_char(line[pos], pos == start, colon)) ++pos;
  return line.substr(start, pos - start);
}

inline bool valid_value(const std::string& v) {
  if (v == "NaN" || v == "+Inf" || v == "-Inf") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return *end == '\0';
}

inline bool valid_escapes(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && (i + 1 >= text.size() || (text[i + 1] != '\\' && text[i + 1] != 'n'))) return false;
    if (text[i] == '\\') ++i;
  }
  return true;
}

}  // namespace detail

// "" when `text` is valid, else "line N: why". Fills `out` with what it read.
inline std::string check_prometheus(const std::string& text, PromText* out) {
  using namespace detail;
  if (!text.empty() && text.back() != '\n') return "the text does not end with a newline";
  std::set<std::string> done_families, series;
  std::string current;  // the family whose samples come now
  std::size_t line_no = 0, start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const std::string where = "line " + std::to_string(++line_no) + ": ";
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# HELP ", 0) != 0 && line.rfind("# TYPE ", 0) != 0) continue;  // a plain comment
      const bool help = line[2] == 'H';
      std::size_t pos = 7;
      const std::string name = read_name(line, pos, true);
      if (name.empty() || (pos < line.size() && line[pos] != ' ')) return where + "bad metric name";
      const std::string rest = pos < line.size() ? line.substr(pos + 1) : "";
      if (done_families.count(name) != 0 || current == name) return where + "HELP or TYPE after the samples of " + name;
      auto& seen = help ? out->help : out->types;
      if (seen.count(name) != 0) return where + "second " + (help ? "HELP" : "TYPE") + " for " + name;
      if (help && !valid_escapes(rest)) return where + "bad escape in HELP";
      if (!help && rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
          rest != "untyped") {
        return where + "bad type '" + rest + "'";
      }
      seen[name] = rest;
      continue;
    }
    PromSample s;
    std::size_t pos = 0;
    s.name = read_name(line, pos, true);
    if (s.name.empty()) return where + "bad metric name";
    if (pos < line.size() && line[pos] == '{') {
      ++pos;
      while (pos < line.size() && line[pos] != '}') {
        const std::string label = read_name(line, pos, false);
        if (label.empty() || pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
          return where + "bad label";
        }
        pos += 2;
        std::string value;
        while (pos < line.size() && line[pos] != '"') {
          if (line[pos] == '\\') {
            if (pos + 1 >= line.size()) return where + "bad escape";
            const char e = line[pos + 1];
            if (e != '\\' && e != '"' && e != 'n') return where + "bad escape \\" + std::string(1, e);
            value += e == 'n' ? '\n' : e;
            pos += 2;
          } else {
            value += line[pos++];
          }
        }
        if (pos >= line.size()) return where + "unterminated label value";
        ++pos;
        if (!s.labels.emplace(label, value).second) return where + "label " + label + " twice";
        if (pos < line.size() && line[pos] == ',') ++pos;
      }
      if (pos >= line.size()) return where + "unterminated labels";
      ++pos;
    }
    if (pos >= line.size() || (line[pos] != ' ' && line[pos] != '\t')) return where + "no value";
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    const std::size_t value_end = line.find_first_of(" \t", pos);
    s.value = line.substr(pos, value_end == std::string::npos ? std::string::npos : value_end - pos);
    if (!valid_value(s.value)) return where + "bad value '" + s.value + "'";
    if (value_end != std::string::npos) {
      const std::string timestamp = line.substr(line.find_first_not_of(" \t", value_end));
      char* e = nullptr;
      std::strtoll(timestamp.c_str(), &e, 10);
      if (timestamp.empty() || *e != '\0') return where + "bad timestamp";
    }
    // Counters and gauges: the family is the sample's own name.
    if (s.name != current) {
      if (done_families.count(s.name) != 0) return where + "samples of " + s.name + " are not together";
      if (!current.empty()) done_families.insert(current);
      current = s.name;
    }
    std::string key = s.name;
    for (const auto& [k, v] : s.labels) key += "\x01" + k + "=" + v;
    if (!series.insert(key).second) return where + "series repeated";
    out->samples.push_back(std::move(s));
  }
  return "";
}

}  // namespace uvmpool::stats::test
