#include "oomharness/reports/budget.h"

#include <cstdio>
#include <sstream>

#include "oomharness/units.h"

namespace oomh {

namespace {

std::string cap_text(const std::optional<uint64_t>& cap) { return cap ? format_bytes(*cap) : std::string("no cap"); }

int runs_made(const BudgetResult& b) { return static_cast<int>(b.runs.size()); }

std::string counting_note(const BudgetResult& b) {
  std::string note = "Counting " + b.counting + ": ";
  note += b.counting == "footprint"
              ? "the cap counted the job's whole device footprint (CUDA context and driver memory included)."
              : "the cap counted the bytes the job allocated through the driver; a real GPU also holds the CUDA "
                "context (about 0.6-0.75 GiB for PyTorch) beside them: use --cap-counts footprint to count it.";
  if (b.virtual_device)
    note += "\nThe job ran on the virtual CUDA device: these figures are modelled (PyTorch's caching allocator on "
            "the CPU), not measured on a GPU.";
  else if (b.simulated)
    note += "\nThe job ran on the CPU driver double (--simulate): these are the figures of what it allocated there, "
            "not measured on a GPU.";
  return note;
}

}  // namespace

std::string budget_sentence(const BudgetResult& b) {
  std::ostringstream o;
  if (b.batch_cap) {
    if (!b.batch) o << "no batch completes under " << format_bytes(*b.batch_cap) << ", not even the smallest tried";
    else
      o << "largest batch under " << format_bytes(*b.batch_cap) << ": " << *b.batch
        << (*b.batch == b.batch_limit ? " (the largest tried, --max-batch)" : " (batch " + std::to_string(*b.batch + 1) + " does not complete)")
        << ", counting " << b.counting;
  } else if (!b.need) {
    o << "no cap tried was enough: the job did not complete even at " << cap_text(b.runs.empty() ? std::nullopt : b.runs.back().cap);
  } else {
    o << "needs " << format_bytes(*b.need) << " (more than " << format_bytes(b.low) << ", to "
      << format_bytes(b.tolerance) << "), counting " << b.counting;
  }
  o << "; " << runs_made(b) << (runs_made(b) == 1 ? " run" : " runs") << " (at most " << b.run_bound << ")";
  return o.str();
}

std::string render_budget_text(const BudgetResult& b) {
  std::ostringstream o;
  o << "Budget of " << b.job << ":\n";
  o << "  run  cap             batch    outcome                        peak held\n";
  for (size_t i = 0; i < b.runs.size(); ++i) {
    const BudgetRun& r = b.runs[i];
    char line[240];
    const std::string outcome = r.completed ? "completed" : std::string("not completed (") + to_string(r.status) + ")";
    std::snprintf(line, sizeof line, "  %-4zu %-15s %-8s %-30s %s\n", i + 1, cap_text(r.cap).c_str(),
                  r.batch ? std::to_string(*r.batch).c_str() : "-", outcome.c_str(), format_bytes(r.peak).c_str());
    o << line;
  }
  o << budget_sentence(b) << "\n";
  if (b.need && !b.batch_cap) {
    o << "Fits on (" << b.counting << " counted):\n";
    for (int gib : kFitsOnGiB) {
      const uint64_t size = static_cast<uint64_t>(gib) << 30;
      char line[160];
      if (size >= *b.need)
        std::snprintf(line, sizeof line, "  %3d GiB  yes  headroom %s\n", gib, format_bytes(size - *b.need).c_str());
      else
        std::snprintf(line, sizeof line, "  %3d GiB  no   short by %s\n", gib, format_bytes(*b.need - size).c_str());
      o << line;
    }
  }
  o << counting_note(b) << "\n";
  return o.str();
}

std::string render_budget_json(const BudgetResult& b) {
  nlohmann::json j;
  j["schema_version"] = b.schema_version;
  j["job"] = b.job;
  j["command"] = b.command;
  j["counting"] = b.counting;
  j["simulated"] = b.simulated;
  j["virtual_device"] = b.virtual_device;
  j["modelled"] = b.simulated || b.virtual_device;
  j["tolerance"] = b.tolerance;
  j["low"] = b.low;
  j["need"] = b.need ? nlohmann::json(*b.need) : nlohmann::json(nullptr);
  j["run_bound"] = b.run_bound;
  j["summary"] = budget_sentence(b);
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& r : b.runs)
    runs.push_back({{"cap", r.cap ? nlohmann::json(*r.cap) : nlohmann::json(nullptr)},
                    {"batch", r.batch ? nlohmann::json(*r.batch) : nlohmann::json(nullptr)},
                    {"completed", r.completed},
                    {"status", to_string(r.status)},
                    {"message", r.message},
                    {"peak", r.peak},
                    {"seconds", r.seconds}});
  j["runs"] = std::move(runs);
  nlohmann::json fits = nlohmann::json::array();
  if (b.need && !b.batch_cap)
    for (int gib : kFitsOnGiB) {
      const uint64_t size = static_cast<uint64_t>(gib) << 30;
      fits.push_back({{"gib", gib}, {"fits", size >= *b.need}, {"headroom", size >= *b.need ? int64_t(size - *b.need) : -int64_t(*b.need - size)}});
    }
  j["fits_on"] = std::move(fits);
  j["batch_cap"] = b.batch_cap ? nlohmann::json(*b.batch_cap) : nlohmann::json(nullptr);
  j["batch"] = b.batch ? nlohmann::json(*b.batch) : nlohmann::json(nullptr);
  j["batch_limit"] = b.batch_limit;
  return j.dump(2) + "\n";
}

}  // namespace oomh
