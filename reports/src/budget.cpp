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

std::string budget_run_outcome(const BudgetRun& r) {
  if (r.fits) return "fits";
  if (r.timed_out) return "timed out";
  if (r.recovered)
    return r.recovered_batch > 0 ? "recovered at batch " + std::to_string(r.recovered_batch) : std::string("recovered from an OOM");
  return std::string("not completed (") + to_string(r.status) + ")";
}

namespace {

const BudgetRun* run_at_batch(const BudgetResult& b, int64_t batch) {
  for (const BudgetRun& r : b.runs)
    if (r.batch && *r.batch == batch) return &r;
  return nullptr;
}

// Why a run did not fit, after "batch 7 ": "does not complete", "recovered at batch 3: it does not fit".
std::string why_not(const BudgetRun* r) {
  if (!r || (!r->recovered && !r->timed_out)) return "does not complete";
  return budget_run_outcome(*r) + ": it does not fit";
}

}  // namespace

std::string budget_sentence(const BudgetResult& b) {
  std::ostringstream o;
  if (!b.cut_short.empty()) {
    o << b.cut_short << "; so far: ";
    if (b.batch_cap) {
      if (b.batch) o << "batch " << *b.batch << " fits under " << format_bytes(*b.batch_cap);
      else o << "no batch tried fits under " << format_bytes(*b.batch_cap);
      const BudgetRun* smallest_not = nullptr;
      for (const BudgetRun& r : b.runs)
        if (r.batch && !r.fits && !r.timed_out && (!smallest_not || *r.batch < *smallest_not->batch)) smallest_not = &r;
      if (smallest_not) o << ", batch " << *smallest_not->batch << " " << why_not(smallest_not);
    } else {
      o << "needs more than " << format_bytes(b.low);
      if (b.need) o << " and at most " << format_bytes(*b.need);
    }
    o << ", counting " << b.counting;
  } else if (b.batch_cap) {
    if (!b.batch) o << "no batch fits under " << format_bytes(*b.batch_cap) << ", not even the smallest tried";
    else
      o << "largest batch under " << format_bytes(*b.batch_cap) << ": " << *b.batch
        << (*b.batch == b.batch_limit ? " (the largest tried, --max-batch)"
                                      : " (batch " + std::to_string(*b.batch + 1) + " " + why_not(run_at_batch(b, *b.batch + 1)) + ")")
        << ", counting " << b.counting;
  } else if (!b.need) {
    o << "no cap tried was enough: the job did not fit even at " << cap_text(b.runs.empty() ? std::nullopt : b.runs.back().cap);
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
    std::snprintf(line, sizeof line, "  %-4zu %-15s %-8s %-30s %s\n", i + 1, cap_text(r.cap).c_str(),
                  r.batch ? std::to_string(*r.batch).c_str() : "-", budget_run_outcome(r).c_str(), format_bytes(r.peak).c_str());
    o << line;
    // Note [Fits means no OOM]: a run that completed after an OOM is named with it.
    if (!r.oom.empty()) o << "       " << r.oom << "\n";
  }
  o << budget_sentence(b) << "\n";
  if (b.need && !b.batch_cap && b.cut_short.empty()) {
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
                    {"fits", r.fits},
                    {"oom", r.oom.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.oom)},
                    {"recovered_batch", r.recovered && r.recovered_batch > 0 ? nlohmann::json(r.recovered_batch) : nlohmann::json(nullptr)},
                    {"recovered", r.recovered},
                    {"timed_out", r.timed_out},
                    {"status", to_string(r.status)},
                    {"message", r.message},
                    {"peak", r.peak},
                    {"seconds", r.seconds}});
  j["runs"] = std::move(runs);
  nlohmann::json fits = nlohmann::json::array();
  if (b.need && !b.batch_cap && b.cut_short.empty())
    for (int gib : kFitsOnGiB) {
      const uint64_t size = static_cast<uint64_t>(gib) << 30;
      fits.push_back({{"gib", gib}, {"fits", size >= *b.need}, {"headroom", size >= *b.need ? int64_t(size - *b.need) : -int64_t(*b.need - size)}});
    }
  j["fits_on"] = std::move(fits);
  j["batch_cap"] = b.batch_cap ? nlohmann::json(*b.batch_cap) : nlohmann::json(nullptr);
  j["batch"] = b.batch ? nlohmann::json(*b.batch) : nlohmann::json(nullptr);
  j["batch_limit"] = b.batch_limit;
  j["cut_short"] = b.cut_short.empty() ? nlohmann::json(nullptr) : nlohmann::json(b.cut_short);
  return j.dump(2) + "\n";
}

}  // namespace oomh
