// The option table as Markdown, for docs/configuration.md (checked by uvmpool-options --check).
#include <string>

#include "config/limits.h"
#include "config/options.h"

namespace uvmpool::config {
namespace {

// A '|' inside a cell would end the cell early.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string_view type_name(Type type) {
  switch (type) {
    case Type::Bool: return "boolean";
    case Type::Int: return "integer";
    case Type::Size: return "size";
    case Type::SizeOrPercent: return "size or percentage";
    case Type::Path: return "path";
    case Type::String: return "text";
    case Type::LogLevel: return "log level";
    case Type::Rate: return "GB/s";
    case Type::Nanos: return "nanoseconds";
  }
  return "";
}

std::string markdown_table() {
  std::string out = "| Variable | Type | Default | Description |\n|---|---|---|---|\n";
  for (std::size_t i = 0; i < kOptionCount; ++i) {
    const OptionInfo& row = kOptionTable[i];
    const std::string_view def = row.default_value;
    out.append("| `").append(row.name).append("` | ");
    out.append(type_name(row.type)).append(" | ");
    out.append(def.empty() ? std::string("(empty)") : "`" + cell(def) + "`").append(" | ");
    out.append(cell(row.help)).append(". Accepted: ").append(cell(expected_form(row))).append(". |\n");
  }
  return out;
}

}  // namespace uvmpool::config
