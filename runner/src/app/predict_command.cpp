// `oomharness predict`: the memory a training needs, from one shape-only run on the virtual device
// (docs/predict.md; python/oomharness/virtual_device/shape_only.py).
//
// Note [Predicting from a shape-only run]
// The job runs as `exec --device virtual` would, with OOMH_SHAPE_ONLY=1: its tensors carry shapes and no
// data (Note [Shape-only mode] in virtual_device/shape_only.py), every device storage is still booked in the caching-
// allocator model through the shim, and at exit the device writes one `prediction` event: the model's peak
// allocated and reserved, the breakdown at the peak allocated (Note [The exact peak] there), the CUDA context
// the driver double holds, the first OOMs the model raised (step, phase, the user's line) and the stand-in
// values the code asked for. This command reads that event and says what it means for cards of the usual
// sizes: a card fits the job when peak reserved + context + the libraries' handles <= its memory. Under
// --cap the run is capped as exec's is, so the OOM it reports is the one the user would see; with `{batch}`
// in the command the batch is halved once more to say what halving would reach. With --batch-under the
// largest batch that fits under the cap is found by the bisection of Note [Budget of a batch] (budget_command.cpp), each run a
// shape-only one, so it costs seconds where budget's runs cost real training steps. A run fits when it
// completed and met no OOM (Note [Fits means no OOM] in oomharness/policies/fit.h): a run whose code caught
// the OOM and recovered is named with its OOM, gets no "fits on" table, and exits 1.
//
// Note [No prediction from a run that did not train]
// A shape-only run that ended before its first training step was done (it crashed in its data pipeline, its
// model's construction, or a check of its own; or it only evaluates) has a peak, but not a training's: a
// "fits on" table drawn from it answered "16 GiB: yes" for a trainer that needs 15 GiB (issue 43). The
// prediction event says how many training steps the run completed and which phases it booked memory in
// (Note [What a prediction covers] in virtual_device/shape_only.py), and predict prints both. With no step
// completed it says so and why (how the run ended), exits 1 and draws no table; a batch-search run that
// trained no step does not fit. A run that trained but did not complete (it crashed later, at an evaluation
// or a checkpoint) shows its figures up to where it stopped, exits 1, and draws no table either: the part
// it did not reach may need more. `--steps N` ends a trainer with no step limit of its own after N steps,
// which counts as completed.

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app/predict_command.h"
#include "app/search.h"
#include "oomharness/policies/fit.h"
#include "oomharness/events.h"
#include "oomharness/json_number.h"
#include "oomharness/reports/terminal_text.h"
#include "oomharness/reports/writers.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/units.h"

namespace fs = std::filesystem;

namespace oomh::app {

namespace {

// Cards of the usual sizes, in GiB as sold (16: V100/T4-class, 24: L4/4090/A10, 40: A100-40, 48: L40S/A6000,
// 80: A100-80/H100, 94: H100 NVL, 141: H200). What a card lets a process allocate is its memory less the
// context, which the table counts.
constexpr int kCardsGiB[] = {16, 24, 40, 48, 80, 94, 141};

// The event the shape-only device writes at exit (src "probe"; python/oomharness/virtual_device/shape_only.py), beside
// `shape_only` at its start and `values_not_computed` at the first stand-in value (events.h).
constexpr const char* kPredictionEvent = events::kPrediction;

// Note [A device larger than any card]
// The prediction's device has 1 TiB (the driver double maps its segments MAP_NORESERVE, so no host memory is
// taken for them): larger than any card of the table, so that the peak is the job's own and not the
// default 80 GiB device's. A job that sizes its batch from mem_get_info() sees that 1 TiB; give --cap (or
// --env CUDA_DOUBLE_MEMORY=SIZE) to predict it on a given card.
constexpr const char* kPredictDeviceMemory = "1TiB";

struct PredictRun {
  std::optional<uint64_t> cap;
  std::optional<int64_t> batch;
  bool completed = false;
  std::string message;
  nlohmann::json prediction;  // the `prediction` event's fields; null when the job wrote none
  double seconds = 0;
  SearchRun run;              // what it came to (Note [A search's runs] in search.h)
  bool stops() const { return run.outcome == SearchOutcome::interrupted || run.outcome == SearchOutcome::timed_out; }
};

std::string text_of(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// Note [No prediction from a run that did not train]: the training steps the run completed (0 when unsaid).
int64_t steps_of(const nlohmann::json& p) { return std::max<int64_t>(0, whole_member_or(p, "steps", int64_t{0})); }

// Whether a run's figures are a training's that fits: completed, trained, no OOM.
bool trained_and_fits(const SearchRun& run, const nlohmann::json& p) { return run.fits() && steps_of(p) > 0; }

// What the run covered: its steps, whether --steps stopped it, the phases it booked memory in.
std::string coverage_text(const nlohmann::json& p) {
  const int64_t steps = steps_of(p);
  std::string s = std::to_string(steps) + " training step" + (steps == 1 ? "" : "s");
  if (p.contains("stopped_after") && p["stopped_after"].is_number_integer())
    s += " (stopped there by --steps)";
  if (p.contains("phases") && p["phases"].is_array() && !p["phases"].empty()) {
    s += "; phases, with each one's peak allocated:";
    for (const auto& ph : p["phases"])
      s += " " + text_of(ph, "phase") + " " + format_bytes(bytes_in(ph, "peak_allocated")) + ",";
    s.pop_back();
  }
  const int64_t saved = whole_member_or(p, "saved", int64_t{0});
  if (saved > 0) s += "; " + std::to_string(saved) + " checkpoint" + (saved == 1 ? "" : "s") + " saved";
  return s;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string with_batch(std::string a, int64_t batch) {
  for (size_t at = a.find("{batch}"); at != std::string::npos; at = a.find("{batch}", at))
    a.replace(at, 7, std::to_string(batch));
  return a;
}

// What a card must hold for the prediction `p`: peak reserved, the CUDA context and the libraries' handles.
uint64_t card_need(const nlohmann::json& p) {
  uint64_t need = 0;  // saturating: figures a job wrote near 2^64 must not wrap round to a small need that fits
  for (const char* key : {"peak_reserved", "context", "libraries"}) {
    const uint64_t v = bytes_in(p, key);
    need = v > UINT64_MAX - need ? UINT64_MAX : need + v;
  }
  return need;
}

nlohmann::json fits_table(uint64_t need) {
  nlohmann::json rows = nlohmann::json::array();
  for (int gib : kCardsGiB) {
    const uint64_t card = static_cast<uint64_t>(gib) << 30;
    rows.push_back({{"card_gib", gib}, {"fits", need <= card},
                    {"headroom", static_cast<double>(card) - static_cast<double>(need)}});
  }
  return rows;
}

void print_prediction(const PredictRun& r, std::ostream& out, const std::string& no_table_why) {
  const nlohmann::json& p = r.prediction;
  const nlohmann::json& b = p.contains("breakdown") ? p["breakdown"] : nlohmann::json::object();
  const uint64_t reserved = bytes_in(p, "peak_reserved"), context = bytes_in(p, "context");
  const uint64_t libraries = bytes_in(p, "libraries");
  out << "  peak allocated    " << format_bytes(bytes_in(p, "peak_allocated")) << "\n"
      << "  peak reserved     " << format_bytes(reserved) << "  (+ CUDA context " << format_bytes(context)
      << " + cuBLAS/cuDNN handles " << format_bytes(libraries) << " = " << format_bytes(card_need(p)) << " of a card)\n";
  if (b.is_object() && b.contains("allocated")) {
    out << "  at the peak allocated (" << format_bytes(bytes_in(b, "allocated"));
    if (b.contains("step")) out << ", step " << whole_member_or(b, "step", int64_t{-1});
    if (!text_of(b, "phase").empty()) out << ", " << text_of(b, "phase");
    out << "):\n";
    const uint64_t workspace = bytes_in(b, "workspace"), other = bytes_in(b, "other");
    for (auto [name, key] : {std::pair{"parameters", "parameters"}, {"gradients", "gradients"},
                             {"optimizer state", "optimizer_state"}}) {
      out << "    " << pad(name, 31) << format_bytes(bytes_in(b, key)) << "\n";
    }
    out << "    " << pad("activations and other tensors", 31) << format_bytes(other) << "\n";
    if (b.contains("sites") && b["sites"].is_array())
      for (const auto& s : b["sites"]) {
        std::string site = text_of(s, "site");
        const int64_t count = whole_member_or(s, "count", int64_t{0});
        out << "      " << pad(site.empty() ? std::string("(small tensors, no line)") : site, 38) << "  "
            << format_bytes(bytes_in(s, "bytes")) << " in " << count << (count == 1 ? " tensor\n" : " tensors\n");
      }
    out << "    " << pad("cuBLAS workspaces", 31) << format_bytes(workspace) << "\n"
        << "    " << pad("cached but free", 31) << format_bytes(bytes_in(b, "cached_free")) << "\n";
  }
  out << "  covered: " << coverage_text(p) << "\n";
  if (!no_table_why.empty()) {
    // Note [Fits means no OOM], Note [No prediction from a run that did not train].
    out << "  fits on: not judged: " << no_table_why << "\n";
    return;
  }
  out << "  fits on (peak reserved + context + handles):\n";
  for (const auto& row : fits_table(card_need(p))) {
    const double h = row["headroom"].get<double>();
    out << "    " << pad(std::to_string(row["card_gib"].get<int>()) + " GiB", 9)
        << (row["fits"].get<bool>() ? "yes  " + format_bytes_figure(h) + " to spare"
                                    : "no   " + format_bytes_figure(-h) + " short")
        << "\n";
  }
}

std::string oom_text(const nlohmann::json& o) {
  std::string s = "out of memory at step " + std::to_string(whole_member_or(o, "step", int64_t{-1}));
  if (!text_of(o, "phase").empty()) s += ", " + text_of(o, "phase");
  if (!text_of(o, "site").empty()) s += ", " + text_of(o, "site");
  s += " (" + format_bytes(bytes_in(o, "allocated")) + " allocated, " + format_bytes(bytes_in(o, "reserved")) +
       " reserved)";
  // A library's handle outside the caching allocator (virtual_device/libraries.py): the code sees a RuntimeError.
  if (!text_of(o, "library").empty()) s += ": " + text_of(o, "library") + "'s handle was refused, " + text_of(o, "message");
  return s;
}

}  // namespace

ExitCode command_predict(const PredictArgs& args, std::ostream& out, std::ostream& err) {
  // Note [Flags that mean something for a prediction]: the command line takes no other report or device flag.
  const ReportFlags& rf = args.exec.reports;
  bool placeholder = false;
  for (const auto& a : args.exec.command) placeholder = placeholder || a.find("{batch}") != std::string::npos;
  if (!placeholder && (!args.batch_under.empty() || args.batch)) {
    err << "oomharness predict: " << (args.batch ? "--batch" : "--batch-under")
        << " needs {batch} in the command, where the batch size goes (--batch-size {batch})\n";
    return ExitCode::usage_error;
  }
  if (args.batch && *args.batch < 1) {
    err << "oomharness predict: bad --batch: it must be at least 1\n";
    return ExitCode::usage_error;
  }
  if (args.max_batch < 1) {
    err << "oomharness predict: bad --max-batch: it must be at least 1\n";
    return ExitCode::usage_error;
  }
  std::optional<uint64_t> batch_cap;
  if (!args.batch_under.empty()) {
    Expected<double> c = parse_bytes(args.batch_under);
    if (!c || *c < 1) {
      err << "oomharness predict: bad --batch-under: " << (c ? "it must be more than 0" : c.error().str()) << "\n";
      return ExitCode::usage_error;
    }
    batch_cap = static_cast<uint64_t>(*c);
  }
  std::optional<uint64_t> cap;
  if (!args.exec.value("--cap").empty()) {
    Expected<double> c = parse_bytes(args.exec.value("--cap"));
    if (!c || *c < 1) {
      err << "oomharness predict: bad --cap: " << (c ? "it must be more than 0" : c.error().str()) << "\n";
      return ExitCode::usage_error;
    }
    cap = static_cast<uint64_t>(*c);
  }
  const int64_t batch = placeholder ? args.batch.value_or(1) : 0;

  // Note [Predicting from a shape-only run]: exec's job, on the virtual device, in shape-only mode.
  auto make_job = [&](std::optional<int64_t> b) -> std::optional<JobSpec> {
    ExecArgs e = args.exec;
    e.job_flags.erase("--cap");
    e.job_flags["--device"] = {"virtual"};
    e.simulate = true;
    std::vector<std::string>& env = e.job_flags["--env"];
    env.push_back("OOMH_SHAPE_ONLY=1");
    if (args.steps) env.push_back("OOMH_SHAPE_STEPS=" + std::to_string(*args.steps));
    // Every part of the probe: the breakdown at the peak sorts tensors by the models and optimizers it saw, and
    // a shape-only step costs no kernel wait (Note [A probe that pays for what is checked] in evidence.h).
    env.push_back("OOMH_EVIDENCE=all");
    // Note [A device larger than any card]: the driver double is an 80 GiB H100 by default, which would cap
    // the prediction at 80 GiB; uncapped, the job must find room for what it needs, and a cap is --cap's.
    bool sized = false;
    for (const auto& kv : env) sized = sized || kv.rfind("CUDA_DOUBLE_MEMORY=", 0) == 0;
    if (!sized) env.push_back(std::string("CUDA_DOUBLE_MEMORY=") + kPredictDeviceMemory);
    if (b)
      for (auto& a : e.command) a = with_batch(a, *b);
    std::optional<JobSpec> job = job_from_exec_args(e, "predict", err);
    if (job && job->expect.empty())
      job->expect.push_back(parse_expect_spec(job->target_step ? "completes" : "exit=0").value());
    return job;
  };
  std::optional<JobSpec> base = make_job(placeholder ? std::optional<int64_t>(batch) : std::nullopt);
  if (!base) return ExitCode::usage_error;

  RunArgs run;
  run.simulate = true;
  run.strict = args.exec.strict;
  run.command_line = args.exec.command_line;
  // Note [A search's runs] in search.h: each run alone, its progress said, its outcome in a search's words.
  Search search("predict", run, args.exec.out_dir, out, err);
  auto label = [](std::optional<uint64_t> at_cap, std::optional<int64_t> b) {
    std::string s = "shape-only run" + (b ? " at batch " + std::to_string(*b) : std::string());
    return s + (at_cap ? " under " + format_bytes(*at_cap) : std::string());
  };
  auto run_at = [&](std::optional<uint64_t> at_cap, std::optional<int64_t> b, int left) -> std::optional<PredictRun> {
    std::optional<JobSpec> made = make_job(b);
    if (!made) return std::nullopt;
    JobSpec job = std::move(*made);
    job.memory.limit = at_cap;
    job.name = base->name + "-predict" + (at_cap ? "-cap-" + std::to_string(*at_cap) : std::string()) +
               (b ? "-batch-" + std::to_string(*b) : std::string());
    std::optional<SearchRun> sr = search.run(std::move(job), label(at_cap, b), left);
    if (!sr) return std::nullopt;
    PredictRun r;
    r.cap = at_cap;
    r.batch = b;
    r.completed = sr->completed();
    r.message = sr->result.message;
    r.seconds = sr->result.duration;
    for (const auto& a : sr->trace.attempts)
      for (const auto& e : a.events)
        if (e.kind == kPredictionEvent && e.fields.is_object()) r.prediction = e.fields;
    r.run = std::move(*sr);
    return r;
  };
  // Note [A search's runs]: an interrupt stops predict with exit 2, a timeout with exit 1, each said with
  // what was found so far (the batch search's bounds).
  auto stopped = [&](const PredictRun& r, nlohmann::json& doc) {
    const std::string why = search.cut_short(r.run, label(r.cap, r.batch));
    out << "  " << why << "\n";
    err << "oomharness predict: " << why << "\n";
    doc["cut_short"] = why;
    return r.run.outcome == SearchOutcome::interrupted ? ExitCode::interrupted : ExitCode::tests_failed;
  };
  auto write_json = [&](const nlohmann::json& doc, ExitCode code) {
    if (rf.json.empty()) return code;
    auto written = write_file_atomic(rf.json, doc.dump(2) + "\n");
    if (!written) {
      err << "oomharness: " << written.error() << "\n";
      return ExitCode::internal_error;
    }
    return code;
  };

  nlohmann::json doc = {{"command", base->argv}, {"shape_only", true}, {"values_computed", false}};
  // Runs after the first: the halved batch under --cap, and the bisection of --batch-under.
  const int later = (cap && placeholder && batch > 1 ? 1 : 0) +
                    (batch_cap ? 1 + bisection_runs_left(static_cast<double>(args.max_batch), 1) : 0);
  auto first = run_at(cap, placeholder ? std::optional<int64_t>(batch) : std::nullopt, later);
  if (!first) return ExitCode::internal_error;
  if (first->stops()) return write_json(doc, stopped(*first, doc));
  if (first->prediction.is_null()) {
    err << "oomharness predict: the job wrote no prediction (did it import torch? is torch 2.x there?): "
        << terminal_text(first->message) << "\n";
    return ExitCode::tests_failed;
  }
  const nlohmann::json& p = first->prediction;
  if (steps_of(p) == 0 && !first->run.oom) {
    // Note [No prediction from a run that did not train].
    const std::string why = first->completed ? "it ended (exit 0) without a training step: " + terminal_text(first->message)
                                             : "it ended before its first training step was done: " + terminal_text(first->message);
    out << "\nNo prediction for " << base->name << ": the shape-only run completed no training step, so its peak is "
        << "not a training's\n  " << why << "\n  covered: " << coverage_text(p) << "\n";
    err << "oomharness predict: no training step was completed: " << why << "\n";
    doc["prediction"] = p;
    doc["completed"] = first->completed;
    doc["fits"] = false;
    doc["trained"] = false;
    doc["fits_on"] = nlohmann::json::array();
    doc["no_prediction"] = why;
    return write_json(doc, ExitCode::tests_failed);
  }
  // Note [Fits means no OOM] (oomharness/policies/fit.h): a run that met an OOM, caught or not, shows what
  // its recovery held, not what the batch needs: no "fits on" table is drawn from it.
  const std::optional<OomMet>& oom = first->run.oom;
  out << "\nPrediction for " << base->name << (placeholder ? " at batch " + std::to_string(batch) : std::string())
      << (cap ? " under a cap of " + format_bytes(*cap) : std::string()) << " (shape-only run on the virtual device, "
      << "PyTorch " << text_of(p, "torch") << ", " << std::fixed;
  out.precision(1);
  out << first->seconds << " s; values not computed):\n";
  std::string no_table_why;
  if (oom) no_table_why = "the run met an out-of-memory error (below), so its peak is not what the job needs";
  else if (!first->completed)
    no_table_why = "the run did not complete (below), so what it did not reach may need more";
  print_prediction(*first, out, no_table_why);
  doc["batch"] = placeholder ? nlohmann::json(batch) : nlohmann::json();
  doc["cap"] = cap ? nlohmann::json(*cap) : nlohmann::json();
  doc["prediction"] = p;
  doc["completed"] = first->completed;
  doc["fits"] = trained_and_fits(first->run, p);
  doc["trained"] = true;
  doc["seconds"] = first->seconds;
  doc["fits_on"] = no_table_why.empty() ? fits_table(card_need(p)) : nlohmann::json::array();

  ExitCode code = ExitCode::ok;
  if (oom) {
    // The OOM the job met, named whether it caught it or not: a run that recovered did not fit (issue 40:
    // `predict --cap` exited 0 with the halved run's peak and "fits on 16 GiB: yes").
    code = ExitCode::tests_failed;
    const nlohmann::json& ooms = p.contains("ooms") ? p["ooms"] : nlohmann::json::array();
    out << "  " << (cap ? "under the cap the job met an OOM: " : "the job met an OOM: ")
        << (ooms.is_array() && !ooms.empty() ? oom_text(ooms[0]) : oom_met_text(*oom)) << "\n";
    if (ooms.is_array() && !ooms.empty()) doc["oom"] = ooms[0];
    else doc["oom"] = {{"step", oom->step}, {"batch", oom->batch}, {"phase", oom->phase}};
    doc["oom"]["caught"] = oom->caught;
    if (first->completed)
      out << "  it " << recovered_text(*oom) << " and completed: "
          << (placeholder ? "batch " + std::to_string(batch) : std::string("the job")) << " does not fit"
          << (cap ? " under " + format_bytes(*cap) : std::string()) << ", and the figures above are its recovery's\n";
    else
      out << "  the job did not complete: " << terminal_text(first->message) << "\n";
    if (oom->steps_after > 0) doc["recovered_batch"] = oom->last_batch > 0 ? nlohmann::json(oom->last_batch) : nlohmann::json();
    if (cap && placeholder && batch > 1) {
      const int64_t half = batch / 2;
      auto h = run_at(cap, half, later - 1);
      if (!h) return ExitCode::internal_error;
      if (h->stops()) return write_json(doc, stopped(*h, doc));
      const bool half_fits = trained_and_fits(h->run, h->prediction);
      out << "  halving the batch to " << half << ": "
          << (half_fits ? "fits, peak reserved " + format_bytes(bytes_in(h->prediction, "peak_reserved"))
              : h->run.fits() ? std::string("completed no training step") : h->run.outcome_text())
          << "\n";
      doc["halved"] = {{"batch", half}, {"completed", h->completed}, {"fits", half_fits},
                       {"peak_reserved", bytes_in(h->prediction, "peak_reserved")}};
    }
  } else if (!first->completed) {
    code = ExitCode::tests_failed;
    out << "  the job did not complete, so the figures above are up to where it stopped, not its needs: "
        << terminal_text(first->message) << "\n";
  }
  const uint64_t stand_ins = bytes_in(p, "stand_ins");
  if (stand_ins > 0) {
    out << "  values not computed: " << stand_ins << " stand-in value" << (stand_ins == 1 ? "" : "s")
        << " given to the code";
    if (p.contains("stand_in_sites") && p["stand_in_sites"].is_array() && !p["stand_in_sites"].empty())
      out << " (first at " << text_of(p["stand_in_sites"][0], "site") << ")";
    out << "; checks that compare values are inconclusive\n";
  }

  if (batch_cap) {
    // Note [Budget of a batch] (budget_command.cpp): batch 1 must fit; --max-batch + 1 is assumed not to.
    int64_t lo = 0, hi = args.max_batch + 1;
    nlohmann::json tried = nlohmann::json::array();
    auto record = [&](const PredictRun& r) {
      nlohmann::json t = {{"batch", *r.batch}, {"completed", r.completed}, {"fits", trained_and_fits(r.run, r.prediction)},
                          {"steps", steps_of(r.prediction)}, {"peak_reserved", bytes_in(r.prediction, "peak_reserved")}};
      if (r.run.oom) {
        t["oom"] = oom_met_text(*r.run.oom);
        if (r.run.outcome == SearchOutcome::recovered && r.run.oom->last_batch > 0) t["recovered_batch"] = r.run.oom->last_batch;
      }
      tried.push_back(std::move(t));
    };
    auto say = [&](const std::string& why) {
      doc["batch_under"] = {{"cap", *batch_cap}, {"largest_batch", lo >= 1 ? nlohmann::json(lo) : nlohmann::json()},
                            {"max_batch", args.max_batch}, {"runs", tried}};
      out << "  largest batch under " << format_bytes(*batch_cap) << ": " << why << " (" << tried.size()
          << " shape-only runs)\n";
    };
    std::optional<PredictRun> why_hi;  // the run at `hi`, what says why it does not fit
    auto why_not = [](const PredictRun& r) {
      return r.run.fits() ? std::string("completed no training step") : r.run.outcome_text();
    };
    auto r1 = run_at(batch_cap, 1, bisection_runs_left(static_cast<double>(args.max_batch), 1));
    if (!r1) return ExitCode::internal_error;
    if (r1->stops()) {
      ExitCode stop = stopped(*r1, doc);
      say("unknown: the search stopped at batch 1");
      return write_json(doc, stop);
    }
    record(*r1);
    if (trained_and_fits(r1->run, r1->prediction)) lo = 1;
    else {
      hi = 1;
      why_hi = std::move(r1);
    }
    while (hi - lo > 1) {
      int64_t mid = lo + (hi - lo) / 2;
      const int left = std::max(bisection_runs_left(static_cast<double>(mid - lo), 1),
                                bisection_runs_left(static_cast<double>(hi - mid), 1));
      auto r = run_at(batch_cap, mid, left);
      if (!r) return ExitCode::internal_error;
      if (r->stops()) {
        ExitCode stop = stopped(*r, doc);
        say("unknown: " + (lo >= 1 ? "batch " + std::to_string(lo) + " fits" : std::string("no batch tried fits")) +
            (hi <= args.max_batch ? ", batch " + std::to_string(hi) + " does not" : std::string()) + " so far");
        return write_json(doc, stop);
      }
      record(*r);
      if (trained_and_fits(r->run, r->prediction)) lo = mid;
      else {
        hi = mid;
        why_hi = std::move(r);
      }
    }
    std::string why;
    if (lo < 1) why = "none (batch 1 " + (why_hi ? why_not(*why_hi) : std::string("does not fit")) + ")";
    else if (lo == args.max_batch) why = std::to_string(lo) + " (--max-batch: larger ones were not tried)";
    else why = std::to_string(lo) + " (batch " + std::to_string(hi) + " " + (why_hi ? why_not(*why_hi) : std::string("does not fit")) + ")";
    say(why);
    if (lo < 1 && code == ExitCode::ok) code = ExitCode::tests_failed;
  }
  out << "Predicted on the virtual device: confirm on a GPU before a long training (docs/predict.md says what "
         "is modelled)\n";
  return write_json(doc, code);
}

}  // namespace oomh::app
