#pragma once
// The report writers: every report is rendered from a RunResult (result.h) alone, so that the same
// results file always gives the same report (`oomharness report results.json`) and golden tests need no
// clock. Rendering never fails; reading and writing files return an Expected that names the path and
// never throw past this header. docs/reports.md describes each format.

#include <cstddef>
#include <cstdint>
#include <string>

#include "oomharness/reports/compare.h"
#include "oomharness/reports/expected.h"
#include "oomharness/reports/result.h"

namespace oomh {


// --json: the results file (docs/results-schema.json), pretty-printed, ending in a newline.
std::string render_json(const RunResult& run);

// Note [Results as they come]
// `run` writes each job's result to <out>/jobs.jsonl as the job is judged, so a runner that is killed
// (SIGKILL, a lost CI machine) loses no finished job's result: line 1 is a header (the stream's name, the
// schema_version, the run's start and command line), each later line one job with its suite. results.json
// is written at the end as before. load_results reads either; from a stream it gives the jobs it holds,
// `interrupted` set unless the stream's last line says the run ended.
std::string job_stream_header(const RunResult& run);
std::string job_stream_line(const SuiteResult& suite, const JobResult& job);
std::string job_stream_end(const RunResult& run);

// Note [Bounded results files]
// `report`, `compare`, `explain` and `run --lf` read a file a person names, which may be anything: a
// regular file only is read (a FIFO would block forever, /dev/zero would never end, a directory is no
// results file: each is refused by what it is), at most `max_bytes` of it (the commands' --max-file-size;
// a 120 MB file once took 690 MB to read), and its schema's required fields (docs/results-schema.json:
// suites, each suite's name and jobs, each job's name and status, each attempt's index and outcome, each
// verdict's policy, status and reason) must be there before anything is rendered from it.
inline constexpr uint64_t kMaxResultsFileBytes = 64ull << 20;

// Reads a results file (or a job stream, above). Fails, naming the file, on I/O errors, JSON syntax errors (with line:column),
// another schema_version, missing required fields and fields of the wrong type (with their path:
// "suites[0].jobs[2].status"), and on a file that is not a regular one or is larger than `max_bytes`.
ReportExpected<RunResult> load_results(const std::string& path, uint64_t max_bytes = kMaxResultsFileBytes);
// The same, from text already read; `name` stands for the file in messages.
ReportExpected<RunResult> parse_results(const std::string& text, const std::string& name);

// --junit: JUnit XML as GitHub's test reporters, GitLab and Jenkins read it.
std::string render_junit(const RunResult& run);

struct HtmlOptions {
  // The directory the HTML file will be written to: snapshot links are made relative to it.
  std::string output_dir;
};
// --html: one self-contained file (inline CSS and SVG, no network), readable without JavaScript.
std::string render_html(const RunResult& run, const HtmlOptions& options = {});

// --markdown: for $GITHUB_STEP_SUMMARY and PR comments; never longer than max_bytes.
std::string render_markdown(const RunResult& run, size_t max_bytes = size_t{1} << 20);

// --perfetto: Trace Event Format JSON for ui.perfetto.dev and chrome://tracing.
std::string render_perfetto(const RunResult& run);

// Writes `content` to a temporary file in path's directory and renames it over `path`, so that a reader
// never sees a half-written report. On failure nothing is left behind and the error names the path.
// `-` (and /dev/stdout, /dev/fd/N) is standard output (that descriptor); a FIFO or device is written to
// and a symlink followed, never replaced (Note [Where a report goes] in write.cpp).
ReportExpected<Written> write_file_atomic(const std::string& path, const std::string& content);

// The same for a file of the run folder (Note [A run folder the runner owns] in runner/src/exec/
// run_folder.h): `name` (one path component) in the open folder `dir`, through a temporary name created
// with O_EXCL and renamed with renameat, so nothing planted there (a link, a FIFO) is followed or written
// into: whatever was at `name` is replaced. `shown` names the file in an error.
ReportExpected<Written> write_file_atomic_at(int dir, const std::string& name, const std::string& content,
                                       const std::string& shown);

// Writes all of `content` to `fd`, again after EINTR and short writes. False on an error (errno says which,
// unless the descriptor took nothing: then errno is as it was).
bool write_all(int fd, const std::string& content);

}  // namespace oomh
