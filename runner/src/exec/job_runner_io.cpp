// The job runner's process I/O: an attempt's stdout and stderr read as lines (Note [Job output] in
// output.h) into its log, its output tail, its OOM message and its observed values.
//
// Note [Bounded job logs]
// An attempt's log keeps at most RunOptions::log_cap bytes: the first lines up to cap minus the tail, and
// the last lines (the tail, at most a quarter of the cap and 8 MiB, held in memory until the attempt ends);
// what lies between is replaced by one line that says how many bytes and lines were cut, and the attempt
// gets a warning event that says the same. A write that fails (a full disk) stops the log and gives a

#include "exec/job_runner_impl.h"

#include <filesystem>

#include <unistd.h>

namespace oomh {

using namespace exec;

void JobRunner::Impl::read_stream(AttemptRun* r, bool is_err) {
  asio::readable_pipe& pipe = is_err ? r->err : r->out;
  auto& buf = is_err ? r->err_buf : r->out_buf;
  pipe.async_read_some(asio::buffer(buf), [this, r, is_err](boost::system::error_code ec, size_t n) {
    consume(*r, is_err, (is_err ? r->err_buf : r->out_buf).data(), n, static_cast<bool>(ec));
    if (ec) {
      (is_err ? r->err_done : r->out_done) = true;
      maybe_finish(r);
      return;
    }
    read_stream(r, is_err);
  });
}

void JobRunner::Impl::consume(AttemptRun& r, bool is_err, const char* data, size_t n, bool eof) {
  const char* stream = is_err ? "stderr" : "stdout";
  double t = now();
  int pid = r.proc ? r.proc->id() : 0;
  std::string chunk;
  uint64_t cap = options.log_cap;
  uint64_t tail_cap = std::min<uint64_t>(cap / 4, 8ull << 20);
  auto on_line = [&](std::string_view line) {
    // Note [Bounded job logs]: the head goes to the file, the rest to the tail kept in memory.
    if (cap == 0 || (r.log_tail.empty() && r.log_written + chunk.size() + line.size() + 1 <= cap - tail_cap)) {
      chunk.append(line);
      chunk += '\n';
    } else {
      r.log_tail.emplace_back(line).push_back('\n');
      r.log_tail_bytes += line.size() + 1;
      while (r.log_tail_bytes > tail_cap && !r.log_tail.empty()) {
        r.log_tail_bytes -= r.log_tail.front().size();
        r.log_cut_bytes += r.log_tail.front().size();
        ++r.log_cut_lines;
        r.log_tail.pop_front();
      }
    }
    r.tail.add(line);
    if (!r.attempt.oom_message && is_oom_message(line)) r.attempt.oom_message = true;
    if (r.job->observer && !r.job->observer->empty()) {
      r.job->observer->match(line, stream, t, pid, r.hits);
      r.observed.add(r.hits);
    }
  };
  LineSplitter& split = is_err ? r.err_split : r.out_split;
  split.feed(data, n, on_line);
  if (eof) split.finish(on_line);
  write_log(r, chunk.data(), chunk.size());
}

void JobRunner::Impl::write_log(AttemptRun& r, const char* data, size_t n) {
  for (size_t off = 0; r.log_fd >= 0 && r.log_errno == 0 && off < n;) {
    ssize_t w = write(r.log_fd, data + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      r.log_errno = w < 0 ? errno : EIO;  // reported by close_log
      break;
    }
    off += static_cast<size_t>(w);
    r.log_written += static_cast<uint64_t>(w);
  }
}

// Writes the cut and the tail, closes the log and puts what went wrong into the attempt's events.
void JobRunner::Impl::close_log(AttemptRun& r) {
  if (r.log_fd < 0) return;
  double t = r.attempt.end != 0 ? r.attempt.end : now();
  if (r.log_cut_bytes > 0) {
    std::string note = "[oomharness: " + std::to_string(r.log_cut_bytes) + " bytes (" + std::to_string(r.log_cut_lines) +
                       " lines) of output cut here: the log keeps at most " + std::to_string(options.log_cap) +
                       " bytes, its first and its last lines]\n";
    write_log(r, note.data(), note.size());
    r.attempt.events.push_back(runner_event(events::kWarning, t,
                                            {{"message", "the output log " + r.attempt.log_path + " was cut: " +
                                                             std::to_string(r.log_cut_bytes) + " bytes (" +
                                                             std::to_string(r.log_cut_lines) + " lines) in its middle are not kept"},
                                             {"log_cut_bytes", r.log_cut_bytes},
                                             {"log_cut_lines", r.log_cut_lines}}));
  }
  for (const std::string& line : r.log_tail) write_log(r, line.data(), line.size());
  r.log_tail.clear();
  r.log_tail_bytes = 0;
  if (close(r.log_fd) != 0 && r.log_errno == 0 && errno != EINTR) r.log_errno = errno;
  r.log_fd = -1;
  if (r.log_errno != 0)
    r.attempt.events.push_back(runner_event(events::kWarning, t,
                                            {{"message", "the output log " + r.attempt.log_path + " could not be written after " +
                                                             std::to_string(r.log_written) + " bytes: " + errno_text(r.log_errno) +
                                                             "; the rest of the output is missing"}}));
}

}  // namespace oomh

namespace oomh {

using namespace exec;

namespace fs = std::filesystem;

// Note [A run folder removed during the run] in run_folder.h.
void JobRunner::Impl::reopen_job_dir(JobState& j) {
  if (!out_fd || removed(out_fd.get())) open_out_dir();
  errno = EBADF;
  j.dir_fd = out_fd ? open_owned_dir(out_fd.get(), job_dir_name(j.spec->name)) : DirFd();
}

bool JobRunner::Impl::restore_removed_folders(AttemptRun& r) {
  JobState& j = *r.job;
  const bool run_folder = removed(out_fd.get());
  if (!run_folder && !removed(j.dir_fd.get())) return false;
  reopen_job_dir(j);
  std::string kept;
  if (j.dir_fd) {
    // The log goes on in the new file (close_log still appends its tail there); the event log is copied.
    if (r.log_fd >= 0) {
      const int fresh = create_file_at(j.dir_fd.get(), fs::path(r.attempt.log_path).filename().string());
      if (fresh >= 0 && copy_file_contents(r.log_fd, fresh)) {
        close(r.log_fd);
        r.log_fd = fresh;
        kept = "its output log";
      } else if (fresh >= 0) {
        close(fresh);
      }
    }
    if (r.events_fd >= 0) {
      const int fresh = create_file_at(j.dir_fd.get(), fs::path(r.events_path).filename().string());
      if (fresh >= 0 && copy_file_contents(r.events_fd, fresh)) kept += kept.empty() ? "its event log" : " and event log";
      if (fresh >= 0) close(fresh);
    }
  }
  const std::string folder = run_folder ? "the run's output folder " + fs::path(options.out_dir).parent_path().string()
                                        : "the job's folder " + j.dir;
  std::string message = folder + " was removed while this attempt ran (by the job?): ";
  message += j.dir_fd ? "the runner made it again" + (kept.empty() ? std::string() : " and wrote " + kept + " back from the files it held open") +
                            "; whatever else was in it is lost"
                      : "the runner could not make it again (" + errno_text(errno) + ")";
  r.attempt.events.push_back(runner_event(events::kWarning, now(), {{"message", message}}));
  return true;
}

}  // namespace oomh
