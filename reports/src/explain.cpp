// The findings and breakdowns of a job in words (explain.h).

#include "oomharness/reports/explain.h"

#include <sstream>

#include "oomharness/json_number.h"
#include "oomharness/units.h"

namespace oomh {

namespace {

std::string text_of(const nlohmann::json& b, const char* key) {
  return b.is_object() && b.contains(key) && b[key].is_string() ? b[key].get<std::string>() : std::string();
}

int64_t int_of(const nlohmann::json& b, const char* key, int64_t fallback = -1) {
  return whole_member_or(b, key, fallback);
}

}  // namespace

std::vector<std::string> finding_lines(const JobResult& job) {
  std::vector<std::string> out;
  for (const Finding& f : job.findings) out.push_back("finding (" + f.rule + "): " + f.sentence);
  return out;
}

std::string breakdown_sentence(const nlohmann::json& b) {
  const std::string kind = text_of(b, "at");
  std::string at = kind == "oom"          ? "at the OOM"
                   : kind == "after_loop" ? "after the loop, as an evaluation began"
                   : kind == "step"       ? "at the end of a step"
                                          : "at the peak";
  int64_t step = int_of(b, "step"), batch = int_of(b, "batch_size");
  std::string where = at + (step >= 0 ? " in step " + std::to_string(step) : std::string()) + " (" +
                      (text_of(b, "phase").empty() ? std::string("unknown phase") : text_of(b, "phase")) +
                      (batch > 0 ? ", batch " + std::to_string(batch) : std::string()) + "), " +
                      attempt_name(static_cast<int>(int_of(b, "attempt", 0)));
  bool exact = !(b.is_object() && b.contains("exact") && b["exact"].is_boolean() && !b["exact"].get<bool>());
  return where + ": " + format_bytes(bytes_in(b, "allocated")) + " allocated " + (exact ? "= " : "~ ") + "parameters " +
         format_bytes(bytes_in(b, "parameters")) + " + gradients " + format_bytes(bytes_in(b, "gradients")) +
         " + optimizer state " + format_bytes(bytes_in(b, "optimizer_state")) + " + workspaces " +
         format_bytes(bytes_in(b, "workspace")) + " + other live tensors " + format_bytes(bytes_in(b, "other")) +
         "; cached but free " + format_bytes(bytes_in(b, "cached_free")) +
         (bytes_in(b, "total") ? " (of " + format_bytes(bytes_in(b, "total")) + ")" : std::string()) +
         (bytes_in(b, "inputs") ? "; its inputs " + format_bytes(bytes_in(b, "inputs")) + " of the other live tensors"
                                : std::string()) +
         (b.is_object() && b.contains("stats_allocated") && b["stats_allocated"].is_number() && !exact
              ? "; torch.cuda.memory_stats() said " + format_bytes(bytes_in(b, "stats_allocated")) + " allocated"
              : std::string());
}

std::vector<std::string> largest_tensor_lines(const nlohmann::json& b, size_t max) {
  std::vector<std::string> out;
  if (!b.is_object() || !b.contains("top") || !b["top"].is_array()) return out;
  for (const auto& t : b["top"]) {
    if (out.size() >= max) break;
    std::string site = text_of(t, "site");
    // On a GPU the memory history names blocks, not tensors: no shape or dtype.
    std::string what = text_of(t, "shape").empty() ? std::string("a block") : text_of(t, "shape") + " " + text_of(t, "dtype");
    out.push_back(what + ", " + format_bytes(bytes_in(t, "bytes")) +
                  (site.empty() ? std::string() : ", made at " + site));
  }
  return out;
}

std::string explain_job(const std::string& suite, const JobResult& job) {
  std::ostringstream out;
  out << (suite.empty() ? "" : suite + "::") << job.name << ": " << to_string(job.status);
  if (!job.message.empty()) out << ": " << job.message;
  out << "\n";
  if (job.findings.empty()) out << "  no finding: none of the rules (docs/diagnosis.md) matched this job\n";
  for (const std::string& line : finding_lines(job)) out << "  " << line << "\n";
  if (job.breakdowns.is_array())
    for (const auto& b : job.breakdowns) {
      out << "  " << breakdown_sentence(b) << "\n";
      for (const std::string& line : largest_tensor_lines(b)) out << "    " << line << "\n";
    }
  return out.str();
}

}  // namespace oomh
