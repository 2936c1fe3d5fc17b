// Note [A run folder the runner owns] in run_folder.h.

#include "exec/run_folder.h"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include <cstdio>
#include <cstring>

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

// Note [Emptying a folder at any depth]
// A job may leave a tree of any depth in its work folder (issue 44: 300 levels made the next run with the
// same --out fail with ELOOP, "Too many levels of symbolic links", from a depth guard). A walk that holds a
// descriptor per level runs out of descriptors, and one that climbs back through ".." may be led elsewhere
// by a rename. So the walk holds at most kOpenLevels descriptors: a folder it meets deeper than that is
// moved (renameat2, RENAME_NOREPLACE, between two descriptors of ours, no path followed) up into the folder
// being emptied, under a fresh name, and emptied from there by a later pass. Each pass goes kOpenLevels
// deeper, so the depth costs passes, not descriptors or stack; a pass that moves nothing is the last.
constexpr int kOpenLevels = 32;
constexpr int kMaxPasses = 1 << 20;

struct Emptying {
  int root;               // the folder being emptied
  uint64_t moved = 0;     // folders moved up into it (their names)
  bool moved_this_pass = false;
};

// Moves `name` in `parent` into the root under a name no entry has.
bool move_up(Emptying& e, int parent, const char* name) {
  for (int tries = 0; tries < 1000; ++tries) {
    char fresh[48];
    std::snprintf(fresh, sizeof fresh, ".oomh-deep-%llu", static_cast<unsigned long long>(e.moved++));
    if (::renameat2(parent, name, e.root, fresh, RENAME_NOREPLACE) == 0) {
      e.moved_this_pass = true;
      return true;
    }
    if (errno == EEXIST) continue;
    if (errno != EINVAL && errno != ENOSYS) return false;
    // A file system without RENAME_NOREPLACE: a plain rename to a name that is not there.
    struct stat st {};
    if (::fstatat(e.root, fresh, &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
    if (::renameat(parent, name, e.root, fresh) != 0) return false;
    e.moved_this_pass = true;
    return true;
  }
  errno = EEXIST;
  return false;
}

// Empties the open folder `fd` (which it closes), `level` levels below the root, unlinking links and files
// and descending into folders through descriptors only.
bool empty_level(Emptying& e, int fd, int level) {
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return false;
  }
  bool ok = true;
  while (dirent* entry = ::readdir(d)) {
    const char* name = entry->d_name;
    if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
    if (::unlinkat(fd, name, 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) {
      ok = false;
      continue;
    }
    if (level + 1 >= kOpenLevels) {  // Note [Emptying a folder at any depth]
      if (!move_up(e, fd, name)) ok = false;
      continue;
    }
    int sub = ::openat(fd, name, kDirFlags);
    if (sub < 0 || !empty_level(e, sub, level + 1) || (::unlinkat(fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT))
      ok = false;
  }
  ::closedir(d);  // closes fd
  return ok;
}

// Empties the open folder `fd` (which it closes), however deep its tree.
bool empty_folder(int fd) {
  Emptying e{fd};
  bool ok = true;
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    e.moved_this_pass = false;
    int again = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (again < 0 || ::lseek(again, 0, SEEK_SET) != 0) {
      if (again >= 0) ::close(again);
      ok = false;
      break;
    }
    ok = empty_level(e, again, 0);
    if (!e.moved_this_pass) break;
  }
  ::close(fd);
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

bool removed(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 && st.st_nlink == 0;
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
  if (!empty_folder(fd)) return false;
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

int reopen_for_reading(int fd) {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return ::open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);  // the magic link reaches an unlinked file too
}

bool copy_file_contents(int from, int to) {
  const int in = reopen_for_reading(from);
  if (in < 0) return false;
  char buf[64 * 1024];
  bool ok = true;
  for (ssize_t n; ok && (n = ::read(in, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = false;
        break;
      }
      off += w;
    }
  }
  const int saved = errno;
  ::close(in);
  errno = saved;
  return ok;
}

bool remove_file_at(int parent, const std::string& name) {
  if (!valid_component(name)) {
    errno = EINVAL;
    return false;
  }
  return ::unlinkat(parent, name.c_str(), 0) == 0 || errno == ENOENT;
}

}  // namespace oomh::exec
