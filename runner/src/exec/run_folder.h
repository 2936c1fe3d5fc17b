#pragma once
// Note [A run folder the runner owns]
// The output folder (--out) is the user's: its own path is followed as given, links included. Everything
// the runner makes under it (jobs/, each job's folder, work/, the logs and event logs, jobs.jsonl,
// results.json, report.html, sweeps/) is the runner's, and a job can write there too: it may plant a
// symbolic link where the runner is about to create a folder, write a log, clean a work folder or write a
// report. So below the output folder nothing is reached through a path string: each folder is opened
// relative to a descriptor of its parent (openat with O_NOFOLLOW | O_DIRECTORY), created where missing, and
// a link found where a folder or a file of the runner's belongs is removed (the link, never what it points
// at) and replaced by the real thing; files are created with O_NOFOLLOW; a work folder is emptied by a walk
// that unlinks links instead of following them, whatever its depth (Note [Emptying a folder at any depth] in
// run_folder.cpp); reports are written to a temporary name and renamed, both
// relative to the folder's descriptor (write_file_atomic_at in reports/writers.h). What a job does inside
// its own folders is its business; what it cannot do is make the runner write or delete anywhere else.

#include <string>

namespace oomh::exec {

// An open directory descriptor (O_DIRECTORY | O_CLOEXEC), closed with the object.
class DirFd {
 public:
  DirFd() = default;
  explicit DirFd(int fd) : fd_(fd) {}
  ~DirFd();
  DirFd(DirFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirFd& operator=(DirFd&& o) noexcept;
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The user's folder `path` (created with its parents where missing; links in it followed). errno on failure.
DirFd open_user_dir(const std::string& path);

// Note [A run folder removed during the run]
// A job can delete the whole output folder (rm -rf "$(dirname $OOMH_EVENTS)/../.."): the runner's
// descriptors then name a folder that is gone, where nothing can be created, and the run once ended with
// exit 3 and no job in results.json. What the runner knows is in memory (every job's result) or in files it
// still holds open (jobs.jsonl); so before it creates anything in its folder it checks that the folder is
// still there (removed(): a folder whose last link went has no links), makes it again from the path it was
// given, warns, and writes there: results.json, report.html, the reports, jobs.jsonl (copied from its open,
// unlinked file), and the later jobs' folders. Logs and event logs already removed are lost.
bool removed(int fd);

// The folder `relative` under `parent` ('/'-separated components, none of them "." or ".."), each
// component created where missing and a link found there replaced by a folder. errno on failure.
DirFd open_owned_dir(int parent, const std::string& relative);

// Removes `name` in `parent` and everything under it without following any link (a link is unlinked).
// True when nothing is left there. errno on failure.
bool remove_tree_at(int parent, const std::string& name);

// Creates (truncates) the file `name` in `parent` for writing, O_NOFOLLOW; a link there is replaced by the
// file. Returns the descriptor (O_CLOEXEC), -1 with errno on failure.
int create_file_at(int parent, const std::string& name, int mode = 0644);

// A new descriptor that reads the file `fd` is open on (opened write-only, perhaps; perhaps unlinked since),
// from its start: -1 with errno on failure.
int reopen_for_reading(int fd);
// Copies everything the file `from` holds (from its start, whatever `from`'s mode and offset) to the end of
// `to`. False with errno on a failed read or write.
bool copy_file_contents(int from, int to);

// Removes the file `name` in `parent` (a link: the link). True when it is gone or was never there.
bool remove_file_at(int parent, const std::string& name);

}  // namespace oomh::exec
