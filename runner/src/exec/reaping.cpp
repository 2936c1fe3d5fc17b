// Note [Nothing left behind] in job_runner_reaping.cpp.

#include "exec/reaping.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace oomh::exec {

void wait_group_gone(pid_t pgid) {
  if (pgid <= 0) return;
  for (int i = 0; i < 2000; ++i) {
    while (waitpid(-pgid, nullptr, WNOHANG) > 0) {}
    if (kill(-pgid, 0) != 0 && errno == ESRCH) return;
    if (i == 0) kill(-pgid, SIGKILL);
    usleep(1000);
  }
}

std::optional<std::string> environment_value(pid_t pid, std::string_view name) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[8192];
  for (ssize_t n; text.size() < (1u << 20) && (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\0', at);
    if (end == std::string::npos) end = text.size();
    std::string_view kv(text.data() + at, end - at);
    if (kv.size() > name.size() && kv.substr(0, name.size()) == name && kv[name.size()] == '=')
      return std::string(kv.substr(name.size() + 1));
    at = end + 1;
  }
  return std::nullopt;
}

std::vector<pid_t> runner_children() {
  std::vector<pid_t> out;
  bool listed = false;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
      FILE* f = std::fopen(path.c_str(), "re");
      if (!f) continue;
      listed = true;
      long pid = 0;
      while (std::fscanf(f, "%ld", &pid) == 1) out.push_back(static_cast<pid_t>(pid));
      std::fclose(f);
    }
    closedir(d);
  }
  if (listed) return out;
  pid_t self = getpid();
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::string path = std::string("/proc/") + e->d_name + "/stat";
      FILE* f = std::fopen(path.c_str(), "re");
      if (!f) continue;
      char buf[512];
      size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      buf[n] = '\0';
      const char* close_paren = std::strrchr(buf, ')');
      char state = 0;
      long ppid = 0;
      if (close_paren && std::sscanf(close_paren + 1, " %c %ld", &state, &ppid) == 2 && ppid == self)
        out.push_back(static_cast<pid_t>(std::atol(e->d_name)));
    }
    closedir(d);
  }
  return out;
}

void kill_and_reap(pid_t pid) {
  if (getpgid(pid) == pid) kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  for (int i = 0; i < 2000; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) != 0) return;
    usleep(500);
  }
}

void remove_stale_blocks() {
  DIR* d = opendir("/dev/shm");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string_view name(e->d_name);
    if (name.rfind("oomh-", 0) != 0) continue;
    std::string_view rest = name.substr(5);
    if (rest.rfind("solo-", 0) == 0) rest.remove_prefix(5);
    size_t digits = 0;
    while (digits < rest.size() && digits < 9 && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    if (digits == 0 || (digits < rest.size() && rest[digits] != '-')) continue;
    pid_t pid = static_cast<pid_t>(std::atol(std::string(rest.substr(0, digits)).c_str()));
    if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    shm_unlink(("/" + std::string(name)).c_str());
  }
  closedir(d);
}

}  // namespace oomh::exec
