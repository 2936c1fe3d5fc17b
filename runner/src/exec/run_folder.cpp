// Note [A run folder the runner owns] in run_folder.h.

#include "exec/run_folder.h"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomh::exec {

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// `name` in `parent` as a folder: opened, created, or a link (or a non-folder) there replaced.
int owned_component(int parent, const std::string& name) {
  for (int tries = 0; tries < 8; ++tries) {
    int fd = ::openat(parent, name.c_str(), kDirFlags);
    if (fd >= 0) return fd;
    if (errno == ENOENT) {
      if (::mkdirat(parent, name.c_str(), 0755) != 0 && errno != EEXIST) return -1;
      continue;
    }
    if (errno == ELOOP || errno == ENOTDIR) {
      // A link (O_NOFOLLOW says ELOOP) or a file where our folder belongs: it goes, the folder comes.
      struct stat st {};
      if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISDIR(st.st_mode)) continue;
      if (::unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) return -1;
      continue;
    }
    return -1;
  }
  errno = ELOOP;
  return -1;
}

bool valid_component(const std::string& c) { return !c.empty() && c != "." && c != ".."; }

// Empties the open folder `fd` (which it closes), unlinking links and files and descending into folders
// through descriptors only.
bool empty_folder(int fd, int depth) {
  if (depth > 256) {
    ::close(fd);
    errno = ELOOP;
    return false;
  }
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return false;
  }
  bool ok = true;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (::unlinkat(fd, name.c_str(), 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) {
      ok = false;
      continue;
    }
    int sub = ::openat(fd, name.c_str(), kDirFlags);
    if (sub < 0 || !empty_folder(sub, depth + 1) || (::unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT))
      ok = false;
  }
  ::closedir(d);  // closes fd
  return ok;
}

}  // namespace

DirFd::~DirFd() {
  if (fd_ >= 0) ::close(fd_);
}

DirFd& DirFd::operator=(DirFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

DirFd open_user_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && ec) errno = ec.value();
  return DirFd(fd);
}

DirFd open_owned_dir(int parent, const std::string& relative) {
  int fd = ::fcntl(parent, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return DirFd();
  size_t start = 0;
  while (start <= relative.size()) {
    size_t end = relative.find('/', start);
    if (end == std::string::npos) end = relative.size();
    const std::string c = relative.substr(start, end - start);
    start = end + 1;
    if (c.empty() && end == relative.size()) break;
    if (!valid_component(c)) {
      ::close(fd);
      errno = EINVAL;
      return DirFd();
    }
    int next = owned_component(fd, c);
    const int saved = errno;
    ::close(fd);
    if (next < 0) {
      errno = saved;
      return DirFd();
    }
    fd = next;
  }
  return DirFd(fd);
}

bool remove_tree_at(int parent, const std::string& name) {
  if (!valid_component(name)) {
    errno = EINVAL;
    return false;
  }
  if (::unlinkat(parent, name.c_str(), 0) == 0 || errno == ENOENT) return true;  // a file or a link
  int fd = ::openat(parent, name.c_str(), kDirFlags);
  if (fd < 0) return errno == ENOENT;
  if (!empty_folder(fd, 0)) return false;
  return ::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT;
}

int create_file_at(int parent, const std::string& name, int mode) {
  if (!valid_component(name)) {
    errno = EINVAL;
    return -1;
  }
  for (int tries = 0; tries < 8; ++tries) {
    int fd = ::openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK, mode);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        return fd;
      }
      ::close(fd);  // a FIFO or a device planted there: not ours to write into
    } else if (errno != ELOOP && errno != EISDIR && errno != ENXIO) {
      return -1;
    }
    if (!remove_tree_at(parent, name)) return -1;
  }
  errno = ELOOP;
  return -1;
}

bool remove_file_at(int parent, const std::string& name) {
  if (!valid_component(name)) {
    errno = EINVAL;
    return false;
  }
  return ::unlinkat(parent, name.c_str(), 0) == 0 || errno == ENOENT;
}

}  // namespace oomh::exec
