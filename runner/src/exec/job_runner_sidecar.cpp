// The job runner's reservation sidecar (runner/sidecar/reserve.cpp).

#include "exec/job_runner_impl.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include <sys/wait.h>

#include <boost/asio/read_until.hpp>

#include "exec/launch.h"

namespace oomh {

using namespace exec;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------
// The reservation sidecar (runner/sidecar/reserve.cpp): started before the job's first attempt, holds
// memory.reserve bytes of real device memory until the job is over.

void JobRunner::Impl::start_sidecar(JobState& j) {
  j.sidecar = std::make_unique<Sidecar>(*ctx);
  Sidecar& s = *j.sidecar;
  std::vector<std::string> args = {"--device", "0"};
  if (j.spec->memory.leave) args.insert(args.end(), {"--leave", std::to_string(*j.spec->memory.leave)});
  else args.insert(args.end(), {"--bytes", std::to_string(j.spec->memory.reserve)});
  if (j.spec->memory.reserve_chunk) {
    args.insert(args.end(), {"--chunk", std::to_string(*j.spec->memory.reserve_chunk), "--fragment"});
  }
  std::string program = options.paths.reserve_program;
  std::vector<std::string> env = sidecar_environment(*j.spec, options.paths, j.placements.front().gpu);
  std::string log = (fs::path(j.dir) / "reserve.log").string();
  if (ns) ns->ensure();
  bp::posix::default_launcher launcher;
  boost::system::error_code ec;
  JobSetup setup(env, "");
  if (program.empty()) ec = boost::system::error_code(ENOENT, boost::system::system_category());
  else {
    auto proc = launcher(ctx->get_executor(), ec, program, args, bp::process_stdio{s.in, s.out, bp::filesystem::path(log)}, setup);
    if (!ec) s.proc.emplace(std::move(proc));
    else if (launcher.pid > 0) waitpid(launcher.pid, nullptr, 0);
  }
  if (ec) {
    s.exited = true;
    j.outcome->error = "cannot start the reservation sidecar '" + program + "': " + ec.message();
    return finish_job(j);
  }
  JobState* jp = &j;
  // One wait for the sidecar's whole life: an exit before READY shows as end of file on its stdout;
  // an exit we asked for (stop_sidecar) completes the job.
  s.proc->async_wait([this, jp](boost::system::error_code, int) {
    Sidecar& sc = *jp->sidecar;
    sc.exited = true;
    sc.kill_timer.cancel();
    if (sc.stopping) complete_job(*jp);
  });
  s.timer.expires_after(seconds(kSidecarReadyTimeout));
  s.timer.async_wait([this, jp](boost::system::error_code e) {
    Sidecar& sc = *jp->sidecar;
    if (e || sc.ready || sc.stopping || jp->finished) return;
    if (jp->outcome->error.empty()) jp->outcome->error = "the reservation sidecar did not report READY within 30 s";
    finish_job(*jp);
  });
  sidecar_read(jp);
}

void JobRunner::Impl::sidecar_read(JobState* j) {
  Sidecar& s = *j->sidecar;
  asio::async_read_until(s.out, asio::dynamic_buffer(s.buf), '\n', [this, j](boost::system::error_code ec, size_t n) {
    Sidecar& sc = *j->sidecar;
    if (sc.ready || sc.stopping || j->finished) return;
    std::string line = ec ? sc.buf : sc.buf.substr(0, n);
    if (!ec) sc.buf.erase(0, n);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (!ec && line.rfind("READY", 0) == 0) {
      sc.ready = true;
      sc.held = std::strtoull(line.c_str() + 5, nullptr, 10);
      sc.timer.cancel();
      if (stopping) {
        j->outcome->interrupted = true;
        return finish_job(*j);
      }
      return start_attempt(*j, false);
    }
    if (!ec && line.rfind("ERROR", 0) != 0) return sidecar_read(j);  // some other chatter
    sc.timer.cancel();
    if (j->outcome->error.empty())
      j->outcome->error = "the reservation sidecar failed: " +
                          (line.rfind("ERROR", 0) == 0 ? line.substr(std::min<size_t>(6, line.size()))
                                                       : std::string("it exited before reporting READY"));
    finish_job(*j);
  });
}

// Closing stdin asks the sidecar to free and exit; SIGTERM does too; SIGKILL if it takes longer than
// kSidecarStopGrace. complete_job runs once it has been reaped.
void JobRunner::Impl::stop_sidecar(JobState& j) {
  Sidecar& s = *j.sidecar;
  if (s.stopping) return;
  s.stopping = true;
  boost::system::error_code ignored;
  s.in.close(ignored);
  s.timer.cancel();
  pid_t pid = s.proc ? s.proc->id() : -1;
  if (pid > 0) kill(pid, SIGTERM);
  JobState* jp = &j;
  s.kill_timer.expires_after(seconds(kSidecarStopGrace));
  s.kill_timer.async_wait([pid, jp](boost::system::error_code e) {
    if (!e && !jp->sidecar->exited && pid > 0) kill(pid, SIGKILL);
  });
}

}  // namespace oomh
