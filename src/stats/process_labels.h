// What labels a process's figures beyond its pid and program: where it runs in Kubernetes and the
// UUIDs of its devices. Shared by the library (which publishes them) and uvmpool-stat (which falls
// back on its own environment for a process that published none, as a sidecar in the same pod).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace uvmpool::stats {

// The Kubernetes downward API variables read, and the label each becomes. Pod manifests set them
// with fieldRef (metadata.name, metadata.namespace) and by hand for the container (docs/deploy.md).
inline constexpr std::pair<const char*, const char*> kKubernetesVariables[] = {
    {"POD_NAME", "pod"}, {"POD_NAMESPACE", "namespace"}, {"CONTAINER_NAME", "container"}};

// The labels whose variables are set (non-empty) in this process's environment, in the order above.
std::vector<std::pair<std::string, std::string>> kubernetes_labels();

// A device UUID as nvidia-smi and the DCGM exporter write it: "GPU-" then 8-4-4-4-12 hex digits.
std::string format_device_uuid(const unsigned char (&bytes)[16]);

}  // namespace uvmpool::stats
