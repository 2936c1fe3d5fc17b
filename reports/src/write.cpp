// Writing a report: to a temporary name in the destination's directory, flushed, then renamed over the
// destination, so that a reader (a CI step, a browser) sees the old file or the new one, never half of one.

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "oomharness/reports/writers.h"

namespace oomh {

namespace {

Expected<Written> failed(const std::string& path, const std::string& what, int err) {
  return Expected<Written>::failure("cannot write " + path + ": " + what + ": " + std::strerror(err));
}

bool write_all(int fd, const std::string& content) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Expected<Written> write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  if (path.empty()) return Expected<Written>::failure("cannot write a report: no file name given");
  const fs::path target(path);
  if (!target.has_filename()) return Expected<Written>::failure("cannot write " + path + ": not a file name");
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");

  std::random_device rd;
  std::string temp;
  int fd = -1;
  for (int tries = 0; tries < 16 && fd < 0; ++tries) {
    temp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                   std::to_string(rd() % 1000000))).string();
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return failed(path, "cannot create a temporary file in " + dir.string(), errno);
  }
  if (fd < 0) return failed(path, "cannot create a temporary file in " + dir.string(), EEXIST);

  if (!write_all(fd, content) || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    return failed(path, "writing " + temp, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return failed(path, "writing " + temp, err);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return failed(path, "renaming the temporary file", err);
  }
  return Expected<Written>::success(Written{});
}

}  // namespace oomh
