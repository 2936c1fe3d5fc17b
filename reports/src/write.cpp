// Writing a report: to a temporary name in the destination's directory, flushed, then renamed over the
// destination, so that a reader (a CI step, a browser) sees the old file or the new one, never half of one.
//
// Note [Where a report goes]
// The rename is for files. A path that names something else is written to, never replaced (a rename
// over /dev/stdout, run as root, once left a regular file where the symlink was):
// - `-`, /dev/stdout, /dev/stderr and /dev/fd/N are the runner's own descriptors, written as they are
//   (reopening /dev/stdout when it is redirected to a file would start writing at offset 0);
// - a character device, a FIFO or a socket that exists at the path is opened and written;
// - a symlink is followed: to a file (or to nothing yet), the atomic write happens at the target's
//   location, so the link stays a link; to a device or FIFO, that is written.

#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

#include "oomharness/reports/writers.h"

namespace oomh {

namespace {

ReportExpected<Written> failed(const std::string& path, const std::string& what, int err) {
  return ReportExpected<Written>::failure("cannot write " + path + ": " + what + ": " + std::strerror(err));
}


// The descriptor a path stands for when it names one of the runner's own (`-`, /dev/stdout, /dev/fd/3),
// or -1.
int own_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout" || path == "/proc/self/fd/1") return STDOUT_FILENO;
  if (path == "/dev/stderr" || path == "/proc/self/fd/2") return STDERR_FILENO;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string p(prefix);
    if (path.size() > p.size() && path.compare(0, p.size(), p) == 0 && path.size() - p.size() <= 6 &&
        path.find_first_not_of("0123456789", p.size()) == std::string::npos)
      return std::stoi(path.substr(p.size()));
  }
  return -1;
}

ReportExpected<Written> write_to(const std::string& path, int fd, const std::string& content) {
  if (!write_all(fd, content)) return failed(path, "writing", errno);
  return ReportExpected<Written>::success(Written{});
}

// Opens what exists at `path` (a device, a FIFO) and writes to it, without creating or replacing.
ReportExpected<Written> write_in_place(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return failed(path, "cannot open it", errno);
  auto w = write_to(path, fd, content);
  ::close(fd);
  return w;
}

// Where a symlink chain ends (the target need not exist yet); empty with errno set on a loop or error.
std::string follow_links(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p.string();
    std::string buf(PATH_MAX, '\0');
    const ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size());
    if (n < 0) return {};
    buf.resize(static_cast<size_t>(n));
    fs::path next(buf);
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  errno = ELOOP;
  return {};
}

ReportExpected<Written> write_replacing(const std::string& path, const std::string& content);

}  // namespace

ReportExpected<Written> write_file_atomic(const std::string& path, const std::string& content) {
  if (path.empty()) return ReportExpected<Written>::failure("cannot write a report: no file name given");
  if (const int fd = own_descriptor(path); fd >= 0) return write_to(path, fd, content);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return write_replacing(path, content);  // nothing there yet
  if (S_ISLNK(st.st_mode)) {
    struct stat target {};
    if (::stat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode) && !S_ISDIR(target.st_mode))
      return write_in_place(path, content);
    const std::string end = follow_links(path);
    if (end.empty()) return failed(path, "cannot follow the symbolic link", errno);
    return write_replacing(end, content);
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return write_in_place(path, content);
  return write_replacing(path, content);
}

namespace {

ReportExpected<Written> write_replacing(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  if (!target.has_filename()) return ReportExpected<Written>::failure("cannot write " + path + ": not a file name");
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
  return ReportExpected<Written>::success(Written{});
}

}  // namespace

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

ReportExpected<Written> write_file_atomic_at(int dir, const std::string& name, const std::string& content,
                                       const std::string& shown) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return ReportExpected<Written>::failure("cannot write " + shown + ": not a file name");
  std::random_device rd;
  std::string temp;
  int fd = -1;
  for (int tries = 0; tries < 16 && fd < 0; ++tries) {
    temp = "." + name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd() % 1000000);
    fd = ::openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return failed(shown, "cannot create a temporary file beside it", errno);
  }
  if (fd < 0) return failed(shown, "cannot create a temporary file beside it", EEXIST);
  if (!write_all(fd, content) || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlinkat(dir, temp.c_str(), 0);
    return failed(shown, "writing " + temp, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlinkat(dir, temp.c_str(), 0);
    return failed(shown, "writing " + temp, err);
  }
  // A folder planted at `name` cannot be renamed over: renameat says EISDIR, and the report is not written.
  if (::renameat(dir, temp.c_str(), dir, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir, temp.c_str(), 0);
    return failed(shown, "renaming the temporary file", err);
  }
  return ReportExpected<Written>::success(Written{});
}

}  // namespace oomh
