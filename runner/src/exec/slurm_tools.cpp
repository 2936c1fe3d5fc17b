// Slurm's command-line tools (slurm_tools.h).

#include "exec/slurm_tools.h"

#include <cstring>
#include <sstream>

#include "oomharness/runner/command.h"

extern char** environ;

namespace oomh::exec {

std::string ToolResult::why() const {
  if (!start_error.empty()) return start_error;
  if (timed_out) return "did not answer in time";
  std::string text = err.empty() ? out : err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return "exited with code " + std::to_string(exit_code);
  return text;
}

std::vector<std::string> tool_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0) continue;
    env.emplace_back(*e);
  }
  return env;
}

ToolResult run_tool(const std::vector<std::string>& argv, const std::vector<std::string>& env, double timeout_seconds) {
  // Note [One way to spawn a helper] in oomharness/runner/command.h.
  SpawnOptions o;
  o.env = env;
  o.own_process_group = true;
  o.keep_stderr = true;
  SpawnResult s = spawn_and_wait(argv, timeout_seconds, o);
  ToolResult r;
  r.start_error = std::move(s.start_error);
  r.timed_out = s.timed_out;
  r.out = std::move(s.out);
  r.err = std::move(s.err);
  if (!r.timed_out && r.start_error.empty()) r.exit_code = s.exit_code ? *s.exit_code : 128 + s.signal.value_or(0);
  return r;
}

std::map<std::string, QueueEntry> parse_squeue(const std::string& text) {
  std::map<std::string, QueueEntry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find('|');
    if (a == std::string::npos) continue;
    size_t b = line.find('|', a + 1);
    std::string id = line.substr(0, a);
    QueueEntry e;
    e.state = line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    if (b != std::string::npos) e.reason = line.substr(b + 1);
    // `CANCELLED by 0` in scontrol; squeue's %T is one word, but be tolerant.
    if (size_t sp = e.state.find(' '); sp != std::string::npos) e.state.resize(sp);
    out[id] = e;
  }
  return out;
}

bool slurm_state_ended(const std::string& state) {
  static const char* const ended[] = {"COMPLETED", "FAILED",    "CANCELLED", "TIMEOUT",  "NODE_FAIL", "OUT_OF_MEMORY",
                                      "PREEMPTED", "BOOT_FAIL", "DEADLINE",  "REVOKED", "SPECIAL_EXIT"};
  for (const char* s : ended)
    if (state == s) return true;
  return false;
}

std::map<std::string, std::string> parse_scontrol_job(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    out.emplace(word.substr(0, eq), word.substr(eq + 1));
  }
  return out;
}

std::string slurm_state_text(const std::string& state) {
  if (state == "CANCELLED") return "Slurm cancelled it (CANCELLED)";
  if (state == "TIMEOUT") return "Slurm's time limit stopped it (TIMEOUT)";
  if (state == "NODE_FAIL") return "its node failed (NODE_FAIL)";
  if (state == "BOOT_FAIL") return "its node failed to boot (BOOT_FAIL)";
  if (state == "OUT_OF_MEMORY") return "Slurm stopped it for using more host memory than it asked for (OUT_OF_MEMORY)";
  if (state == "PREEMPTED") return "Slurm preempted it (PREEMPTED)";
  if (state == "DEADLINE") return "it missed its deadline (DEADLINE)";
  if (state == "FAILED") return "its batch script failed (FAILED)";
  if (state == "COMPLETED") return "its batch script exited 0 (COMPLETED)";
  if (state.empty()) return "Slurm no longer knows it";
  return "it ended in state " + state;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

}  // namespace oomh::exec
