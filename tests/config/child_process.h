// Runs a program with exactly the given environment and collects its exit status and output.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace uvmpool::testing {

struct ChildResult {
  int exit_status = -1;  // -1 unless it exited normally
  std::string out, err;
};

inline std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh, empty file path under TMPDIR (or /tmp) for the test to use.
inline std::string temp_path(const char* stem) {
  const char* dir = std::getenv("TMPDIR");
  std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/uvmpool-" + stem + "-XXXXXX";
  int fd = mkstemp(pattern.data());
  if (fd >= 0) close(fd);
  return pattern;
}

inline ChildResult run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  const std::string out_path = temp_path("out"), err_path = temp_path("err");
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  args.push_back(nullptr);
  envp.push_back(nullptr);

  ChildResult result;
  const pid_t pid = fork();
  if (pid == 0) {
    // In the child only async-signal-safe calls until exec.
    const int out = open(out_path.c_str(), O_WRONLY | O_TRUNC);
    const int err = open(err_path.c_str(), O_WRONLY | O_TRUNC);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) result.exit_status = WEXITSTATUS(status);
  result.out = read_whole_file(out_path);
  result.err = read_whole_file(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  return result;
}

}  // namespace uvmpool::testing
