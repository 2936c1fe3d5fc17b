// The HTML report: one self-contained file that opens from disk, in CI artifacts or mail.
//
// Note [HTML safety]
// Everything a job or a suite controls (names, commands, output, verdict reasons, paths) is untrusted: a
// job may print "<script>alert(1)</script>". All of it goes through text::xml_escape, in text and in
// quoted attributes alike, and element ids are made from indices, never from names. As a second wall the
// page carries a Content-Security-Policy that forbids every load (default-src 'none') and allows exactly
// our own inline style and script by their SHA-256, so that an escaping mistake still cannot run code or
// reach the network. The page is complete without JavaScript (tables and server-side SVG); the script
// only makes the summary table sortable.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "oomharness/reports/explain.h"
#include "oomharness/reports/writers.h"
#include "oomharness/units.h"
#include "sha256.h"
#include "text.h"

namespace oomh {

namespace {

using text::xml_escape;

constexpr const char* kStyle = R"css(
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--soft:#f6f8fa;--pass:#1a7f37;--fail:#cf222e;--error:#82071e;--skip:#9a6700;--int:#8250df}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;max-width:1200px;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:16px;margin:0 0 6px}code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px 10px;overflow:auto;max-height:420px;white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;width:100%;margin:6px 0 10px}th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}td.num{text-align:right;white-space:nowrap}
table.sortable th{cursor:pointer}
.counts span{margin-right:14px;font-weight:600}.muted{color:var(--muted)}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;color:#fff;white-space:nowrap}
.s-passed,.v-pass{background:var(--pass)}.s-failed,.v-fail{background:var(--fail)}.s-error{background:var(--error)}
.s-skipped,.s-inconclusive,.v-inconclusive{background:var(--skip)}.s-interrupted{background:var(--int)}
.s-xfail,.v-xfail{background:#4d7c5a}.s-xpass,.v-xpass{background:var(--fail)}
.headline{font-size:17px;font-weight:600;margin:4px 0 10px}.h-ok{color:var(--pass)}.h-fail{color:var(--fail)}.h-none{color:var(--skip)}
.banner{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:8px 12px;margin:10px 0;font-weight:600}
.findings{background:#fff8f6;border-left:3px solid #cf222e;padding:4px 12px;margin:8px 0}.divergences{background:#f6f8fa;border-left:3px solid #d4a72c;padding:4px 12px;margin:8px 0}.divergences ul{margin:4px 0}
.warnings{background:#fff8c5;border-left:3px solid #bf8700;padding:4px 12px;margin:8px 0}.warnings ul{margin:4px 0}
.job{border:1px solid var(--line);border-radius:8px;padding:12px 16px;margin:14px 0}
.job.failed,.job.error{border-left:4px solid var(--fail)}.job.passed{border-left:4px solid var(--pass)}
.message{margin:4px 0 8px}
dl.env{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:6px 0}dl.env dt{font-weight:600}dl.env dd{margin:0}
svg.chart{width:100%;height:auto;border:1px solid var(--line);border-radius:6px;background:#fff}
svg text{font:11px system-ui,sans-serif;fill:#59636e}
.legend{font-size:12px;color:var(--muted);margin:2px 0 8px}.legend span{margin-right:14px;white-space:nowrap}
.sw{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:4px}
summary{cursor:pointer}
)css";

// Sorts the summary table when a header is clicked: a nicety, the table reads the same without it.
constexpr const char* kScript =
    "document.querySelectorAll('table.sortable th').forEach(function(th,i){th.addEventListener('click',function(){"
    "var tb=th.closest('table').tBodies[0],rows=Array.prototype.slice.call(tb.rows),asc=th.dataset.dir!=='asc';"
    "th.dataset.dir=asc?'asc':'desc';rows.sort(function(a,b){var x=a.cells[i].dataset.v||a.cells[i].textContent,"
    "y=b.cells[i].dataset.v||b.cells[i].textContent,nx=parseFloat(x),ny=parseFloat(y),"
    "c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});"
    "rows.forEach(function(r){tb.appendChild(r);});});});";

constexpr const char* kDeviceColours[] = {"#0969da", "#1a7f37", "#8250df", "#bf3989", "#0a7ea4", "#953800"};

std::string csp_hash(const char* content) {
  const auto digest = detail::sha256(content);
  return "'sha256-" + detail::base64(digest.data(), digest.size()) + "'";
}

std::string num(double v, int decimals = 1) { return text::seconds(v, decimals); }

std::string job_id(size_t suite, size_t job) { return "job-" + std::to_string(suite) + "-" + std::to_string(job); }

// A job's status; an expected failure or an unexpected pass (Note [Expected failures]) says so.
std::string badge(const JobResult& job) {
  if (job.expected_failure()) return "<span class=\"badge s-xfail\">XFAIL</span>";
  if (job.unexpected_pass()) return "<span class=\"badge s-xpass\">XPASS</span>";
  return std::string("<span class=\"badge s-") + to_string(job.status) + "\">" + to_string(job.status) + "</span>";
}

// A check the suite says must fail: its fail is the expected outcome (xfail), a pass is what fails the
// job (xpass), and each says so.
std::string verdict_badge(const Verdict& v) {
  const char* word = text::verdict_word(v);
  std::string b = std::string("<span class=\"badge v-") + word + "\">" + word + "</span>";
  if (v.must_fail) b += " <span class=\"muted\">(must fail)</span>";
  return b;
}

// A tick step of 1, 2 or 5 times a power of ten, giving about `count` ticks over `range`.
double nice_step(double range, int count) {
  if (range <= 0) return 1;
  const double raw = range / count;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

// Byte ticks on binary boundaries (a multiple of 1, 2 or 5 of a power of 1024's unit) read better.
double nice_bytes_step(double range) {
  if (range <= 0) return 1;
  double unit = 1;
  while (range / unit >= 1024 * 4) unit *= 1024;
  return nice_step(range / unit, 6) * unit;
}

// ---- the memory timeline chart -------------------------------------------------------------------------

struct Chart {
  static constexpr double kWidth = 960, kHeight = 300, kLeft = 78, kRight = 16, kTop = 34, kBottom = 34;
  double t_max = 1, y_max = 1;
  double x(double t) const { return kLeft + (kWidth - kLeft - kRight) * std::clamp(t / t_max, 0.0, 1.0); }
  double y(double bytes) const { return kHeight - kBottom - (kHeight - kTop - kBottom) * std::clamp(bytes / y_max, 0.0, 1.0); }
  double top() const { return kTop; }
  double bottom() const { return kHeight - kBottom; }
};

// The chart's lines: one per rank for a job with ranks (their figures would mix in the per-device
// timeline), else one per device.
struct Lane {
  std::string name;  // "GPU 0", "rank 1"
  const std::vector<TimelinePoint>* points;
};
std::vector<Lane> lanes(const JobResult& job) {
  std::vector<Lane> out;
  if (!job.rank_timeline.empty())
    for (const auto& [rank, points] : job.rank_timeline) out.push_back({"rank " + std::to_string(rank), &points});
  else
    for (const auto& [device, points] : job.timeline) out.push_back({"GPU " + std::to_string(device), &points});
  return out;
}

Chart chart_scale(const JobResult& job) {
  Chart c;
  double t_max = job.duration, y_max = 0;
  for (const Lane& lane : lanes(job)) {
    for (const TimelinePoint& p : *lane.points) {
      t_max = std::max(t_max, p.t);
      y_max = std::max({y_max, static_cast<double>(p.held), static_cast<double>(p.cap)});
    }
  }
  for (const auto& [device, bytes] : job.peak) y_max = std::max(y_max, static_cast<double>(bytes));
  for (const Marker& m : job.markers) t_max = std::max(t_max, m.t);
  for (const FaultRecord& f : job.faults) t_max = std::max(t_max, f.t);
  for (const AttemptResult& a : job.attempts) t_max = std::max(t_max, a.start + a.duration);
  c.t_max = t_max > 0 ? t_max : 1;
  c.y_max = y_max > 0 ? y_max * 1.08 : 1;
  return c;
}

void axes(std::ostream& svg, const Chart& c) {
  const double ystep = nice_bytes_step(c.y_max);
  for (double v = 0; v <= c.y_max + 1e-9; v += ystep) {
    svg << "<line x1=\"" << num(Chart::kLeft) << "\" x2=\"" << num(Chart::kWidth - Chart::kRight) << "\" y1=\""
        << num(c.y(v)) << "\" y2=\"" << num(c.y(v)) << "\" stroke=\"#eaeef2\"/>";
    svg << "<text x=\"" << num(Chart::kLeft - 6) << "\" y=\"" << num(c.y(v) + 4) << "\" text-anchor=\"end\">"
        << xml_escape(format_bytes_figure(v)) << "</text>\n";
  }
  const double tstep = nice_step(c.t_max, 8);
  for (double t = 0; t <= c.t_max + 1e-9; t += tstep) {
    svg << "<line x1=\"" << num(c.x(t)) << "\" x2=\"" << num(c.x(t)) << "\" y1=\"" << num(c.bottom()) << "\" y2=\""
        << num(c.bottom() + 5) << "\" stroke=\"#59636e\"/>";
    svg << "<text x=\"" << num(c.x(t)) << "\" y=\"" << num(c.bottom() + 18) << "\" text-anchor=\"middle\">"
        << xml_escape(format_duration(t)) << "</text>\n";
  }
  svg << "<line x1=\"" << num(Chart::kLeft) << "\" x2=\"" << num(Chart::kWidth - Chart::kRight) << "\" y1=\""
      << num(c.bottom()) << "\" y2=\"" << num(c.bottom()) << "\" stroke=\"#59636e\"/>\n";
  svg << "<text x=\"" << num(Chart::kWidth - Chart::kRight) << "\" y=\"" << num(Chart::kHeight - 2)
      << "\" text-anchor=\"end\">seconds since the job started</text>\n";
}

// Held bytes as a line; the cap as a dashed step line (it may change mid-run).
void series(std::ostream& svg, const Chart& c, const JobResult& job) {
  size_t colour = 0;
  for (const Lane& lane : lanes(job)) {
    const std::vector<TimelinePoint>& points = *lane.points;
    std::string cap_path, held_path;
    for (size_t i = 0; i < points.size(); ++i) {
      const TimelinePoint& p = points[i];
      held_path += (i == 0 ? "M" : "L") + num(c.x(p.t)) + " " + num(c.y(static_cast<double>(p.held)));
      if (p.cap == 0) continue;
      if (cap_path.empty()) cap_path = "M" + num(c.x(p.t)) + " " + num(c.y(static_cast<double>(p.cap)));
      else cap_path += "H" + num(c.x(p.t)) + "V" + num(c.y(static_cast<double>(p.cap)));
    }
    if (!cap_path.empty()) {
      cap_path += "H" + num(c.x(c.t_max));
      uint64_t last_cap = 0;
      for (const TimelinePoint& p : points) last_cap = p.cap ? p.cap : last_cap;
      svg << "<text x=\"" << num(Chart::kWidth - Chart::kRight - 2) << "\" y=\"" << num(c.y(static_cast<double>(last_cap)) - 5)
          << "\" text-anchor=\"end\">cap " << xml_escape(format_bytes(last_cap)) << "</text>";
      svg << "<path d=\"" << cap_path << "\" fill=\"none\" stroke=\"#cf222e\" stroke-width=\"1.5\" "
          << "stroke-dasharray=\"6 4\"><title>cap, " << lane.name << "</title></path>\n";
    }
    svg << "<path d=\"" << held_path << "\" fill=\"none\" stroke=\"" << kDeviceColours[colour % 6]
        << "\" stroke-width=\"1.8\" stroke-linejoin=\"round\"><title>held, " << lane.name << "</title></path>\n";
    ++colour;
  }
}

void restarts(std::ostream& svg, const Chart& c, const JobResult& job) {
  for (const AttemptResult& a : job.attempts) {
    if (a.index == 0) continue;
    const double x = c.x(a.start);
    svg << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << num(c.top() - 8) << "\" y2=\""
        << num(c.bottom()) << "\" stroke=\"#59636e\" stroke-dasharray=\"3 3\"><title>restart: " << attempt_name(a.index)
        << " started at " << num(a.start, 2) << "s</title></line>";
    svg << "<text x=\"" << num(x + 3) << "\" y=\"" << num(c.top() - 10) << "\">" << attempt_name(a.index) << "</text>\n";
  }
}

void step_ticks(std::ostream& svg, const Chart& c, const JobResult& job) {
  std::vector<const Marker*> steps;
  for (const Marker& m : job.markers)
    if (m.kind == "step") steps.push_back(&m);
  const size_t every = steps.size() / 150 + 1;  // keep the axis readable for long runs
  for (size_t i = 0; i < steps.size(); i += every) {
    const double x = c.x(steps[i]->t);
    svg << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << num(c.bottom() - 6) << "\" y2=\""
        << num(c.bottom()) << "\" stroke=\"#8c959f\"><title>" << xml_escape(steps[i]->label) << "</title></line>";
  }
  if (!steps.empty()) svg << "\n";
}

// Injected faults on the top row (hollow: absorbed by the framework, filled: the training code saw an
// OOM); the framework-level events under them.
// At most kMaxFaultMarkers are drawn (10^5 markers made a 20 MB page); the visible ones first, since they
// are what a reader looks for, and the job's summary line says how many were left out.
constexpr size_t kMaxFaultMarkers = 1000;

std::vector<const FaultRecord*> drawn_faults(const JobResult& job) {
  // Chosen visible first, drawn in time order (as every fault is when they fit).
  std::vector<bool> chosen(job.faults.size(), false);
  size_t n = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < job.faults.size() && n < kMaxFaultMarkers; ++i)
      if (job.faults[i].visible == (pass == 0)) {
        chosen[i] = true;
        ++n;
      }
  std::vector<const FaultRecord*> out;
  for (size_t i = 0; i < job.faults.size(); ++i)
    if (chosen[i]) out.push_back(&job.faults[i]);
  return out;
}

void events(std::ostream& svg, const Chart& c, const JobResult& job) {
  for (const FaultRecord* fp : drawn_faults(job)) {
    const FaultRecord& f = *fp;
    const double x = c.x(f.t), y = c.top() - 2;
    std::string title = std::string("injected fault (") + (f.visible ? "visible" : "absorbed") + "): " + f.entry + " " +
                        format_bytes(f.size) + " on GPU " + std::to_string(f.device) + ", rule " + f.rule;
    if (f.step >= 0) title += ", step " + std::to_string(f.step);
    if (!f.phase.empty()) title += ", " + f.phase;
    if (f.layer != "driver") title += ", asked at the " + f.layer + " layer";
    svg << "<path d=\"M" << num(x - 5) << " " << num(y - 8) << "L" << num(x + 5) << " " << num(y - 8) << "L" << num(x)
        << " " << num(y) << "Z\" fill=\"" << (f.visible ? "#cf222e" : "#fff") << "\" stroke=\""
        << (f.visible ? "#cf222e" : "#bc4c00") << "\" stroke-width=\"1.5\"><title>" << xml_escape(title)
        << "</title></path>";
  }
  for (const Marker& m : job.markers) {
    const double x = c.x(m.t), y = c.top() + 8;
    const std::string title = "<title>" + xml_escape(m.kind + (m.label.empty() ? "" : ": " + m.label)) + "</title>";
    if (m.kind == "oom") {
      svg << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << num(c.top()) << "\" y2=\""
          << num(c.bottom()) << "\" stroke=\"#cf222e\" stroke-width=\"1.2\">" << title << "</line>"
          << "<circle cx=\"" << num(x) << "\" cy=\"" << num(y) << "\" r=\"5\" fill=\"#cf222e\">" << title << "</circle>";
    } else if (m.kind == "empty_cache") {
      svg << "<circle cx=\"" << num(x) << "\" cy=\"" << num(y) << "\" r=\"4.5\" fill=\"#fff\" stroke=\"#1a7f37\" "
          << "stroke-width=\"2\">" << title << "</circle>";
    } else if (m.kind == "checkpoint_save" || m.kind == "checkpoint_load") {
      const bool save = m.kind == "checkpoint_save";
      svg << "<rect x=\"" << num(x - 4) << "\" y=\"" << num(y + 10) << "\" width=\"8\" height=\"8\" fill=\""
          << (save ? "#8250df" : "#fff") << "\" stroke=\"#8250df\" stroke-width=\"1.5\">" << title << "</rect>";
    }
  }
  svg << "\n";
}

std::string timeline_chart(const JobResult& job) {
  std::ostringstream svg;
  bool any_points = false;
  for (const Lane& lane : lanes(job)) any_points = any_points || !lane.points->empty();
  if (!any_points) return "<p class=\"muted\">No memory samples were recorded for this job.</p>\n";
  const Chart c = chart_scale(job);
  svg << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << num(Chart::kWidth, 0) << " "
      << num(Chart::kHeight, 0) << "\" role=\"img\" aria-label=\"memory held per device over time\">\n";
  axes(svg, c);
  step_ticks(svg, c, job);
  restarts(svg, c, job);
  series(svg, c, job);
  events(svg, c, job);
  svg << "</svg>\n";
  std::string legend = "<div class=\"legend\">";
  size_t colour = 0;
  for (const Lane& lane : lanes(job))
    legend += std::string("<span><i class=\"sw\" data-c=\"") + std::to_string(colour % 6) + "\"></i>held, " + lane.name +
              "</span>", ++colour;
  legend +=
      "<span><i class=\"sw\" data-c=\"cap\"></i>cap</span><span>&#9661; fault injected, absorbed</span>"
      "<span>&#9660; fault injected, visible</span><span>&#9679; OOM seen by the training code</span>"
      "<span>&#9675; empty_cache</span><span>&#9632; checkpoint saved (&#9633; loaded)</span>"
      "<span>| step</span><span>&#8942; restart</span></div>\n";
  return svg.str() + legend;
}

// Legend swatches take their colour from a class, not a style attribute (the CSP allows no inline styles).
std::string swatch_css() {
  std::string css;
  for (int i = 0; i < 6; ++i) css += ".sw[data-c=\"" + std::to_string(i) + "\"]{background:" + kDeviceColours[i] + "}";
  css += ".sw[data-c=\"cap\"]{background:repeating-linear-gradient(90deg,#cf222e 0 6px,transparent 6px 10px)}\n";
  return css;
}

// ---- the page ------------------------------------------------------------------------------------------

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : " ") + p;
  return s;
}

void summary_table(std::ostream& out, const RunResult& run) {
  out << "<table class=\"sortable summary\">\n<thead><tr><th>job</th><th>suite</th><th>status</th><th>verdicts</th>"
         "<th>attempts</th><th>faults injected / visible</th><th>peak</th><th>duration</th></tr></thead>\n<tbody>\n";
  for (size_t s = 0; s < run.suites.size(); ++s) {
    const SuiteResult& suite = run.suites[s];
    for (size_t k = 0; k < suite.jobs.size(); ++k) {
      const JobResult& job = suite.jobs[k];
      const auto peak = text::job_peak(job);
      out << "<tr><td><a href=\"#" << job_id(s, k) << "\">" << xml_escape(job.name) << "</a></td><td>"
          << xml_escape(suite.name) << "</td><td data-v=\"" << to_string(job.status) << "\">" << badge(job)
          << "</td><td>";
      for (const Verdict& v : job.verdicts) out << xml_escape(v.policy) << " " << verdict_badge(v) << " ";
      if (job.verdicts.empty()) out << "<span class=\"muted\">none</span>";
      out << "</td><td class=\"num\">" << job.attempts.size() << "</td><td class=\"num\" data-v=\"" << job.faults.size()
          << "\">" << job.faults.size() << " / " << job.faults_visible() << "</td><td class=\"num\" data-v=\""
          << peak.value_or(0) << "\">" << (peak ? xml_escape(format_bytes(*peak)) : "-") << "</td><td class=\"num\" data-v=\""
          << num(job.duration, 3) << "\">" << xml_escape(format_duration(job.duration)) << "</td></tr>\n";
    }
  }
  out << "</tbody></table>\n";
}

void environment(std::ostream& out, const RunResult& run) {
  const Environment& env = run.environment;
  out << "<h2>Environment</h2>\n<dl class=\"env\">\n";
  const auto row = [&](const std::string& name, const std::string& value) {
    out << "<dt>" << xml_escape(name) << "</dt><dd>" << (value.empty() ? "<span class=\"muted\">unknown</span>" : xml_escape(value))
        << "</dd>\n";
  };
  row("host", env.hostname);
  const bool says_simulated = env.gpu_name.find("simulated") != std::string::npos;
  row("GPU", env.gpu_name + (env.simulated_device && !says_simulated ? " (simulated)" : ""));
  if (!env.virtual_device.empty()) row("virtual device", env.virtual_device);
  row("driver", env.driver_version);
  row("CUDA", env.cuda_version);
  for (const auto& [name, version] : env.frameworks) row(name, version);
  row("oomharness", env.harness_version);
  out << "<dt>command</dt><dd><code>" << xml_escape(join(env.command_line)) << "</code></dd>\n";
  row("started", text::iso8601_utc(run.start).empty() ? "" : text::iso8601_utc(run.start) + " UTC");
  row("duration", format_duration(run.duration));
  out << "</dl>\n";
}

void verdicts(std::ostream& out, const JobResult& job) {
  if (job.verdicts.empty()) { out << "<p class=\"muted\">No recovery checks were evaluated.</p>\n"; return; }
  out << "<table class=\"verdicts\"><thead><tr><th>check</th><th>verdict</th><th>reason</th><th>evidence</th></tr>"
         "</thead><tbody>\n";
  for (const Verdict& v : job.verdicts) {
    out << "<tr><td><code>" << xml_escape(v.policy) << "</code></td><td>" << verdict_badge(v) << "</td><td>"
        << xml_escape(v.reason) << "</td><td>";
    for (const Evidence& e : v.evidence)
      out << attempt_name(e.attempt) << ", " << num(e.t, 2) << "s: " << xml_escape(e.what) << "<br>";
    out << "</td></tr>\n";
  }
  out << "</tbody></table>\n";
}

void attempts(std::ostream& out, const JobResult& job) {
  if (job.attempts.empty()) return;
  out << "<table class=\"attempts\"><thead><tr><th>attempt</th><th>outcome</th><th>exit</th><th>start</th>"
         "<th>duration</th><th>last step</th><th>faults</th></tr></thead><tbody>\n";
  for (const AttemptResult& a : job.attempts) {
    std::string exit = a.exit_code ? "code " + std::to_string(*a.exit_code) : "";
    if (a.signal) exit += (exit.empty() ? "" : ", ") + std::string("signal ") + std::to_string(*a.signal);
    out << "<tr><td class=\"num\">" << a.index + 1 << "</td><td>" << xml_escape(outcome_name(a.outcome)) << "</td><td>" << xml_escape(exit)
        << "</td><td class=\"num\">" << num(a.start, 2) << "s</td><td class=\"num\">"
        << xml_escape(format_duration(a.duration)) << "</td><td class=\"num\">"
        << (a.last_step >= 0 ? std::to_string(a.last_step) : "-") << "</td><td>" << (a.faults_enabled ? "on" : "cleared")
        << "</td></tr>\n";
  }
  out << "</tbody></table>\n";
}

// "file.pickle" relative to the report's directory when both are known, as a URL path.
std::string snapshot_href(const std::string& snapshot, const std::string& output_dir) {
  namespace fs = std::filesystem;
  fs::path p(snapshot);
  if (!output_dir.empty()) {  // both relative to the same working directory, or absolute
    std::error_code ec1, ec2;
    const fs::path from = fs::absolute(output_dir, ec1).lexically_normal();
    const fs::path rel = fs::absolute(p, ec2).lexically_normal().lexically_relative(from);
    if (!ec1 && !ec2 && !rel.empty()) p = rel;
  }
  std::string href;
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : p.generic_string()) {  // percent-encode all but unreserved characters and '/'
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') href += static_cast<char>(c);
    else { href += '%'; href += kHex[c >> 4]; href += kHex[c & 15]; }
  }
  return p.is_absolute() ? "file://" + href : href;
}

void output_tails(std::ostream& out, const JobResult& job) {
  for (size_t i = 0; i < job.attempts.size(); ++i) {
    const AttemptResult& a = job.attempts[i];
    if (a.output_tail.empty()) continue;
    // Open what explains a failure: the last attempt, and any attempt that ended in an OOM.
    const bool open = job.status != JobStatus::passed && (i + 1 == job.attempts.size() || a.outcome == AttemptOutcome::oom);
    out << "<details" << (open ? " open" : "") << "><summary>output of " << attempt_name(a.index) << " ("
        << xml_escape(outcome_name(a.outcome)) << ")";
    if (!a.log_path.empty()) out << ", full log <code>" << xml_escape(a.log_path) << "</code>";
    out << "</summary>\n<pre>" << xml_escape(text::tail(a.output_tail, 80, 32 * 1024)) << "</pre></details>\n";
  }
}

// What held the memory at each OOM and at the peak (docs/diagnosis.md): one stacked bar per breakdown, its
// parts to scale of the memory the job had (total), and the largest tensors under it.
void breakdowns(std::ostream& out, const JobResult& job) {
  if (job.findings.empty() && (!job.breakdowns.is_array() || job.breakdowns.empty())) return;
  out << "<div class=\"findings\"><b>What held the memory</b>";
  if (!job.findings.empty()) {
    out << "<ul>";
    for (const std::string& f : finding_lines(job)) out << "<li>" << xml_escape(f) << "</li>";
    out << "</ul>";
  }
  out << "\n";
  static const std::pair<const char*, const char*> kParts[] = {
      {"parameters", "#0969da"}, {"gradients", "#8250df"}, {"optimizer_state", "#bf8700"},
      {"workspace", "#6e7781"}, {"other", "#cf222e"}, {"cached_free", "#d0d7de"}};
  for (const auto& b : job.breakdowns) {
    if (!b.is_object()) continue;
    auto part = [&](const char* key) { return b.contains(key) && b[key].is_number() ? std::max(0.0, b[key].get<double>()) : 0.0; };
    double whole = 0;
    for (const auto& [key, colour] : kParts) whole += part(key);
    whole = std::max(whole, part("total"));
    if (whole <= 0) continue;
    out << "<p>" << xml_escape(breakdown_sentence(b)) << "</p>\n<svg class=\"breakdown\" width=\"640\" height=\"20\" "
        << "role=\"img\"><rect x=\"0\" y=\"0\" width=\"640\" height=\"20\" fill=\"#f6f8fa\"/>";
    double x = 0;
    for (const auto& [key, colour] : kParts) {
      double w = part(key) / whole * 640.0;
      if (w <= 0) continue;
      out << "<rect x=\"" << num(x) << "\" y=\"0\" width=\"" << num(w) << "\" height=\"20\" fill=\"" << colour
          << "\"><title>" << key << ": " << xml_escape(format_bytes_figure(part(key))) << "</title></rect>";
      x += w;
    }
    out << "</svg>\n";
    const auto tensors = largest_tensor_lines(b);
    if (!tensors.empty()) {
      out << "<details><summary>largest live tensors</summary><ul>";
      for (const std::string& t : tensors) out << "<li><code>" << xml_escape(t) << "</code></li>";
      out << "</ul></details>\n";
    }
    // PyTorch's own account at an OOM (the probe keeps at most 8 KiB of it).
    if (b.contains("summary") && b["summary"].is_string() && !b["summary"].get<std::string>().empty())
      out << "<details><summary>torch.cuda.memory_summary()</summary><pre>" << xml_escape(b["summary"].get<std::string>())
          << "</pre></details>\n";
  }
  out << "<p class=\"muted\">bars: parameters (blue), gradients (purple), optimizer state (amber), workspaces (grey), "
      << "other live tensors (red), cached but free (light), to scale of the device's memory</p></div>\n";
}

void job_section(std::ostream& out, const SuiteResult& suite, const JobResult& job, const std::string& id,
                 const HtmlOptions& options) {
  out << "<section class=\"job " << to_string(job.status) << "\" id=\"" << id << "\">\n<h3>" << xml_escape(job.name)
      << " " << badge(job) << "</h3>\n";
  if (!job.message.empty()) out << "<p class=\"message\">" << xml_escape(job.message) << "</p>\n";
  if (job.expected_failure())
    out << "<p class=\"message\">Expected failure: " << xml_escape(expected_failure_sentence(job)) << "</p>\n";
  out << "<p class=\"muted\">suite " << xml_escape(suite.name) << " &middot; " << job.attempts.size() << " attempt(s) &middot; "
      << job.faults.size() << " fault(s) injected, " << job.faults_visible() << " visible, " << job.faults_absorbed()
      << " absorbed";
  if (job.faults.size() > kMaxFaultMarkers)
    out << " (" << job.faults.size() - kMaxFaultMarkers << " more not shown: the chart marks the first "
        << kMaxFaultMarkers << ", visible ones first)";
  if (job.recovery_seconds) out << " &middot; recovered in " << xml_escape(format_duration(*job.recovery_seconds));
  if (job.gpu) out << " &middot; GPU " << *job.gpu;
  if (job.virtual_device) out << " &middot; " << xml_escape(*job.virtual_device);
  out << " &middot; " << xml_escape(step_numbering(job.step_base));
  out << " &middot; <code>" << xml_escape(join(job.command)) << "</code></p>\n";
  if (!job.divergences.empty()) {  // Note [Saying what was simulated]
    out << "<div class=\"divergences\"><b>Where this run differs from a GPU</b><ul>";
    for (const auto& [kind, detail] : job.divergences)
      out << "<li><code>" << xml_escape(kind) << "</code> " << xml_escape(detail) << "</li>";
    out << "</ul></div>\n";
  }
  if (!job.warnings.empty()) {
    out << "<div class=\"warnings\"><b>Warnings</b><ul>";
    for (const std::string& w : job.warnings) out << "<li>" << xml_escape(w) << "</li>";
    out << "</ul></div>\n";
  }
  verdicts(out, job);
  breakdowns(out, job);
  out << timeline_chart(job);
  attempts(out, job);
  if (job.snapshot) {
    out << "<p>PyTorch memory snapshot: <a href=\"" << xml_escape(snapshot_href(*job.snapshot, options.output_dir))
        << "\">" << xml_escape(*job.snapshot) << "</a> <span class=\"muted\">(open it by dropping the file on "
        << "https://pytorch.org/memory_viz)</span></p>\n";
  }
  output_tails(out, job);
  out << "</section>\n";
}

}  // namespace

std::string render_html(const RunResult& run, const HtmlOptions& options) {
  const std::string style = kStyle + swatch_css();
  const RunResult::Counts c = run.counts();
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src " << csp_hash(style.c_str())
      << "; script-src " << csp_hash(kScript) << "; img-src data:; base-uri 'none'; form-action 'none'\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<title>oomharness: " << xml_escape(counts_sentence(run)) << "</title>\n"
      << "<style>" << style << "</style>\n</head>\n<body>\n";
  // The headline is green only for a run that tested something and saw no failure
  // (RunResult::nothing_tested).
  const char* tone = c.failed || c.errors || c.interrupted ? "h-fail" : run.nothing_tested() ? "h-none" : "h-ok";
  out << "<h1>oomharness report</h1>\n<p class=\"headline " << tone << "\">" << xml_escape(counts_sentence(run))
      << "</p>\n<p class=\"counts\"><span>" << c.total << " jobs</span><span>" << c.passed - c.xfailed
      << " passed</span><span>" << c.failed - c.xpassed << " failed</span><span>" << c.errors << " errors</span><span>"
      << c.inconclusive << " inconclusive</span><span>" << c.skipped << " skipped</span>";
  if (c.xfailed) out << "<span>" << c.xfailed << " xfailed</span>";
  if (c.xpassed) out << "<span>" << c.xpassed << " xpassed</span>";
  if (c.interrupted) out << "<span>" << c.interrupted << " interrupted</span>";
  out << "<span class=\"muted\">" << xml_escape(format_duration(run.duration)) << "</span></p>\n";
  if (run.nothing_tested())
    out << "<div class=\"banner\">Nothing was tested: no job passed or failed. An inconclusive job ran without "
           "showing anything either way (read its reason below); a skipped job did not run.</div>\n";
  for (const std::string& note : simulation_notes(run))  // Note [Saying what was simulated]
    out << "<div class=\"banner\">" << xml_escape(note) << "</div>\n";
  if (run.interrupted) out << "<div class=\"banner\">The run was interrupted before every job finished.</div>\n";
  out << "<h2>Summary</h2>\n";
  summary_table(out, run);
  environment(out, run);
  for (size_t s = 0; s < run.suites.size(); ++s) {
    const SuiteResult& suite = run.suites[s];
    out << "<h2>Suite " << xml_escape(suite.name) << " <span class=\"muted\">" << xml_escape(suite.file) << "</span></h2>\n";
    for (size_t k = 0; k < suite.jobs.size(); ++k) job_section(out, suite, suite.jobs[k], job_id(s, k), options);
  }
  out << "<script>" << kScript << "</script>\n</body>\n</html>\n";
  return out.str();
}

}  // namespace oomh
