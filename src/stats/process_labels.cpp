#include "stats/process_labels.h"

#include <cstdio>
#include <cstdlib>

namespace uvmpool::stats {

std::vector<std::pair<std::string, std::string>> kubernetes_labels() {
  std::vector<std::pair<std::string, std::string>> labels;
  for (const auto& [variable, label] : kKubernetesVariables) {
    const char* value = std::getenv(variable);
    if (value != nullptr && *value != '\0') labels.emplace_back(label, value);
  }
  return labels;
}

std::string format_device_uuid(const unsigned char (&b)[16]) {
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

}  // namespace uvmpool::stats
