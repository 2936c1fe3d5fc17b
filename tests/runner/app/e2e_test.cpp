// End to end: the real `oomharness` binary over real processes (the emulated trainer), the real shim
// (LD_PRELOAD) and the CPU driver double. Pieces come from CMake as APP_E2E_* variables; a piece that
// was not built arrives as MISSING:<target> and the tests that need it fail saying which: these tests
// must run wherever the project is built, never skip quietly.

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

extern char** environ;

namespace fs = std::filesystem;

namespace {

// The path in variable `var`, or a test failure naming the target that was not built.
#define NEED(var, out)                                                                                  \
  std::string out;                                                                                      \
  do {                                                                                                  \
    const char* v_ = std::getenv(var);                                                                  \
    ASSERT_TRUE(v_ && *v_) << var " is not set: run this test through ctest";                          \
    out = v_;                                                                                           \
    ASSERT_EQ(out.rfind("MISSING:", 0), std::string::npos)                                            \
        << "target " << out.substr(8) << " is not built, so `oomharness` cannot be tested end to end"; \
  } while (0)

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Result {
  int code = -1;
  std::string out, err;
};

struct Child {
  pid_t pid = -1;
  fs::path out, err;
};

Child spawn(const std::vector<std::string>& args, const fs::path& cwd, const fs::path& logs,
            const std::vector<std::string>& extra_env = {}) {
  static int counter = 0;
  Child c;
  c.out = logs / ("stdout-" + std::to_string(++counter));
  c.err = logs / ("stderr-" + std::to_string(counter));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> env_strings;
  auto overridden = [&](const std::string& kv) {  // extra_env replaces a variable of the same name
    std::string name = kv.substr(0, kv.find('=') + 1);
    for (const auto& x : extra_env)
      if (x.rfind(name, 0) == 0) return true;
    return false;
  };
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    if (s.rfind("CI=", 0) == 0 || s.rfind("GITHUB_STEP_SUMMARY=", 0) == 0 || overridden(s)) continue;
    env_strings.push_back(s);
  }
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  // posix_spawn has no chdir before glibc 2.29's _np extension; run through sh -c 'cd && exec'.
  std::string script = "cd \"$0\" && exec \"$@\"";
  std::vector<char*> shv = {const_cast<char*>("sh"), const_cast<char*>("-c"), script.data(), const_cast<char*>(cwd.c_str())};
  for (size_t i = 0; i + 1 < argv.size(); ++i) shv.push_back(argv[i]);
  shv.push_back(nullptr);
  posix_spawnp(&c.pid, "sh", &fa, nullptr, shv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

Result wait_for(const Child& c, double timeout = 240) {
  Result r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  int status = 0;
  for (;;) {
    pid_t w = waitpid(c.pid, &status, WNOHANG);
    if (w == c.pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      r.err = "(killed: still running after " + std::to_string(timeout) + " s)\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  r.out = read_file(c.out);
  r.err += read_file(c.err);
  return r;
}

Result run(const std::vector<std::string>& args, const fs::path& cwd, const fs::path& logs,
           const std::vector<std::string>& env = {}) {
  return wait_for(spawn(args, cwd, logs, env));
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

class E2E : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/oomh-app-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
    else std::cerr << "kept " << dir_ << " for inspection\n";
  }
  fs::path dir_;
};

// A job of the emulated trainer, as suite YAML. Its caching allocator serves repeated sizes from its cache,
// so a step-triggered fault needs an allocation that reaches the driver during that step: each step keeps
// a small new block (--leak-per-step), as a real job's growing state would. `flags` go after the others.
std::string trainer_job(const std::string& trainer, const std::string& name, const std::string& recovery, int steps,
                        const std::string& extra_yaml, int step_ms = 5, const std::vector<std::string>& flags = {}) {
  std::ostringstream y;
  y << "  - name: " << name << "\n"
    << "    run: [\"" << trainer << "\", \"--steps\", \"" << steps << "\", \"--batch-size\", \"32\", "
    << "\"--bytes-per-sample\", \"65536\", \"--recovery\", \"" << recovery << "\", \"--min-batch\", \"2\", "
    << "\"--leak-per-step\", \"4096\", \"--step-ms\", \"" << step_ms << "\"";
  for (const std::string& f : flags) y << ", \"" << f << "\"";
  y << "]\n"
    << "    timeout: 120s\n"
    << extra_yaml;
  return y.str();
}

const char* kFaultAtStep3 =
    "    faults:\n"
    "      - name: oom-at-3\n"
    "        when: {step: 3}\n"
    "        fail: {times: 1}\n";

std::string write_suite(const fs::path& dir, const std::string& name, const std::string& jobs) {
  fs::path p = dir / (name + ".yaml");
  std::ofstream(p) << "version: 1\nname: " << name << "\njobs:\n" << jobs;
  return p.string();
}

nlohmann::json load_json(const fs::path& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f.good()) << "missing " << p;
  return nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
}

std::map<std::string, const nlohmann::json*> jobs_by_name(const nlohmann::json& results) {
  std::map<std::string, const nlohmann::json*> out;
  for (const auto& s : results["suites"])
    for (const auto& j : s["jobs"]) out[j["name"].get<std::string>()] = &j;
  return out;
}

bool python_parses_xml(const fs::path& p) {
  std::string cmd = "python3 -c 'import sys,xml.etree.ElementTree as E; E.parse(sys.argv[1])' '" + p.string() + "'";
  return std::system(cmd.c_str()) == 0;
}

// ---------------------------------------------------------------------------------------------------

TEST_F(E2E, VersionHelpAndUsageErrors) {
  NEED("APP_E2E_BIN", bin);
  Result v = run({bin, "--version"}, dir_, dir_);
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("oomharness 0."), std::string::npos) << v.out;
  for (const char* cmd : {"run", "exec", "sweep", "budget", "validate", "report", "explain", "compare", "demo"}) {
    Result h = run({bin, cmd, "--help"}, dir_, dir_);
    EXPECT_EQ(h.code, 0) << cmd << ": " << h.err;
    EXPECT_NE(h.out.find("Usage"), std::string::npos) << cmd;
  }
  EXPECT_EQ(run({bin}, dir_, dir_).code, 4);
  EXPECT_EQ(run({bin, "frobnicate"}, dir_, dir_).code, 4);
  EXPECT_EQ(run({bin, "run", "--jobs", "x", "a.yaml"}, dir_, dir_).code, 4);
  Result missing = run({bin, "validate", "no-such-suite.yaml"}, dir_, dir_);
  EXPECT_EQ(missing.code, 4);
  EXPECT_NE(missing.err.find("no-such-suite.yaml"), std::string::npos) << missing.err;
}

// Note [Did you mean, on the command line] in runner/src/app/cli.cpp: a misspelt command or flag is named
// with what was meant; a word near nothing gets no guess.
TEST_F(E2E, MisspeltCommandsAndFlagsSayWhatWasMeant) {
  NEED("APP_E2E_BIN", bin);
  Result cmd = run({bin, "rnu", "a.yaml"}, dir_, dir_);
  EXPECT_EQ(cmd.code, 4);
  EXPECT_NE(cmd.err.find("unknown command 'rnu' (did you mean 'run'?)"), std::string::npos) << cmd.err;
  Result flag = run({bin, "run", "--simulte", "a.yaml"}, dir_, dir_);
  EXPECT_EQ(flag.code, 4);
  EXPECT_NE(flag.err.find("unknown option '--simulte' (did you mean '--simulate'?)"), std::string::npos) << flag.err;
  Result top = run({bin, "--verison"}, dir_, dir_);
  EXPECT_NE(top.err.find("did you mean '--version'?"), std::string::npos) << top.err;
  Result far = run({bin, "frobnicate"}, dir_, dir_);
  EXPECT_EQ(far.code, 4);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
  Result hidden = run({bin, "agnet", "plan.json"}, dir_, dir_);  // the internal `agent` is never offered
  EXPECT_EQ(hidden.err.find("'agent'"), std::string::npos) << hidden.err;
}

TEST_F(E2E, ValidateReportsEveryMalformedSuiteAsFileLineCol) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_SOURCE_DIR", src);
  fs::path malformed = fs::path(src) / "tests/runner/suite/malformed";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(malformed)) {
    if (entry.path().extension() != ".yaml") continue;
    fs::path expected_file = entry.path();
    expected_file.replace_extension(".expected");
    ASSERT_TRUE(fs::exists(expected_file)) << entry.path() << " has no .expected file";
    std::string expected = first_line(read_file(expected_file));
    std::string name = entry.path().filename().string();
    Result r = run({bin, "validate", name}, malformed, dir_);
    EXPECT_EQ(r.code, 4) << name << ": " << r.out << r.err;
    std::string got = first_line(r.err);
    // The .expected line may name the file with a folder; the command names it as given (the bare name).
    std::string tail = expected.size() >= got.size() ? expected.substr(expected.size() - got.size()) : expected;
    EXPECT_TRUE(got == expected || (tail == got && expected[expected.size() - got.size() - 1] == '/'))
        << name << "\n  expected: " << expected << "\n  got:      " << got;
    EXPECT_TRUE(std::regex_search(got, std::regex("^" + name + ":[0-9]+:[0-9]+: "))) << got;
    ++checked;
  }
  EXPECT_GT(checked, 10) << "the malformed-suite corpus is missing from " << malformed;
}

TEST_F(E2E, ValidateAcceptsAValidSuite) {
  NEED("APP_E2E_BIN", bin);
  std::string suite = write_suite(dir_, "valid",
                                  "  - name: a\n    run: echo hello\n    expect:\n      - exit: 0\n"
                                  "  - name: b\n    run: [\"true\"]\n");
  Result r = run({bin, "validate", suite}, dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ok: 2 jobs in " + suite), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(E2E, RunSuiteErrorsStopBeforeAnyJob) {
  NEED("APP_E2E_BIN", bin);
  fs::path marker = dir_ / "ran";
  std::string good = write_suite(dir_, "good", "  - name: a\n    run: touch " + marker.string() + "\n");
  std::string bad = write_suite(dir_, "bad", "  - name: a\n    run: echo\n    tiemout: 5s\n");
  Result r = run({bin, "run", good, bad, "--simulate", "--out", (dir_ / "out").string()}, dir_, dir_);
  EXPECT_EQ(r.code, 4);
  EXPECT_TRUE(std::regex_search(r.err, std::regex("bad\\.yaml:6:5: .*tiemout"))) << r.err;
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(E2E, RunPassingAndFailingJobsWritesReportsThatParse) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  std::string jobs = trainer_job(trainer, "halving", "halve", 6, std::string(kFaultAtStep3) +
                                 "    expect:\n      - batch_halving: {factor: 0.5, min: 2}\n      - completes: 6\n") +
                     trainer_job(trainer, "no_recovery", "none", 6, std::string(kFaultAtStep3) +
                                 "    expect:\n      - batch_halving: {factor: 0.5, min: 2}\n");
  std::string suite = write_suite(dir_, "e2e", jobs);
  fs::path out = dir_ / "out";
  Result r = run({bin, "run", suite, "--simulate", "--out", out.string(), "--junit", (dir_ / "junit.xml").string(),
                  "--json", (dir_ / "copy.json").string(), "--html", (dir_ / "r.html").string(), "--markdown",
                  (dir_ / "r.md").string(), "--perfetto", (dir_ / "trace.json").string()},
                 dir_, dir_);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("HTML report: " + (out / "report.html").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 failed, 1 passed"), std::string::npos) << r.out;

  nlohmann::json results = load_json(out / "results.json");
  ASSERT_FALSE(results.is_discarded());
  EXPECT_EQ(results, load_json(dir_ / "copy.json"));
  EXPECT_EQ(results["environment"]["simulated_device"], true);
  EXPECT_EQ(results["environment"]["gpu_name"], "simulated (CPU driver double)");
  auto jobs_found = jobs_by_name(results);
  ASSERT_EQ(jobs_found.size(), 2u);
  const auto& pass = *jobs_found.at("halving");
  const auto& fail = *jobs_found.at("no_recovery");
  EXPECT_EQ(pass["status"], "passed") << pass.dump(2).substr(0, 4000);
  EXPECT_EQ(fail["status"], "failed") << fail.dump(2).substr(0, 4000);
  EXPECT_FALSE(fail["message"].get<std::string>().empty());
  EXPECT_FALSE(pass["faults"].empty());
  EXPECT_EQ(pass["faults"][0]["visible"], true);
  EXPECT_FALSE(pass["markers"].empty());
  // The failing job's first failing sentence is printed under it.
  EXPECT_NE(r.out.find("-> " + fail["message"].get<std::string>()), std::string::npos) << r.out;

  EXPECT_TRUE(python_parses_xml(dir_ / "junit.xml"));
  std::string junit = read_file(dir_ / "junit.xml");
  EXPECT_NE(junit.find("no_recovery"), std::string::npos);
  EXPECT_NE(junit.find("<failure"), std::string::npos);
  for (const fs::path& html : {out / "report.html", dir_ / "r.html"}) {
    std::string h = read_file(html);
    EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u) << html;
    EXPECT_NE(h.find("</html>"), std::string::npos) << html;
    EXPECT_NE(h.find("no_recovery"), std::string::npos) << html;
  }
  EXPECT_NE(read_file(dir_ / "r.md").find("no_recovery"), std::string::npos);
  EXPECT_FALSE(load_json(dir_ / "trace.json").is_discarded());

  // report: the same results give the reports again.
  Result rep = run({bin, "report", (out / "results.json").string(), "--junit", (dir_ / "again.xml").string()}, dir_, dir_);
  EXPECT_EQ(rep.code, 0) << rep.err;
  EXPECT_EQ(read_file(dir_ / "again.xml"), junit);

  // compare: a base where every job passed makes this run a regression; the run against itself is not.
  nlohmann::json base = results;
  for (auto& s : base["suites"])
    for (auto& j : s["jobs"]) {
      j["status"] = "passed";
      for (auto& v : j["verdicts"]) v["status"] = "pass";
    }
  std::ofstream(dir_ / "base.json") << base.dump();
  Result same = run({bin, "compare", (out / "results.json").string(), (out / "results.json").string()}, dir_, dir_);
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  Result worse = run({bin, "compare", (dir_ / "base.json").string(), (out / "results.json").string(), "--fail-on",
                      "verdict", "--markdown", (dir_ / "cmp.md").string()},
                     dir_, dir_);
  EXPECT_EQ(worse.code, 1) << worse.out << worse.err;
  EXPECT_NE(worse.out.find("REGRESSION e2e::no_recovery: "), std::string::npos) << "one job name form: suite::job\n" << worse.out;
  EXPECT_TRUE(fs::exists(dir_ / "cmp.md"));
  EXPECT_EQ(run({bin, "compare", (dir_ / "base.json").string(), (out / "results.json").string(), "--fail-on", "peak:+x%"},
                dir_, dir_).code,
            4);
}

// Note [Counting the footprint] through the runner: the driver double's context takes 40 MiB and the NVML
// double reports it for the job's pid. Under a 64 MiB cap that counts the footprint, the trainer ends at a
// quarter of the batch it ends at when the same cap counts allocations only.
TEST_F(E2E, ACapThatCountsTheFootprintLeavesLessForTheBatch) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  NEED("APP_E2E_NVML_DOUBLE", nvml);
  auto job = [&](const std::string& name, const std::string& counts) {
    return "  - name: " + name + "\n" +
           "    run: [\"" + trainer + "\", --steps, 3, --batch-size, 32, --bytes-per-sample, 1MiB, --recovery, halve, --min-batch, 2]\n" +
           "    env: {CUDA_DOUBLE_CONTEXT_MEMORY: 40MiB, LD_LIBRARY_PATH: \"" + fs::path(nvml).parent_path().string() + "\"}\n" +
           "    memory: {limit: 64MiB, counts: " + counts + "}\n" +
           "    expect: [{exit: 0}, {completes: 3}]\n";
  };
  std::string suite = write_suite(dir_, "counts", job("footprint", "footprint") + job("allocations", "allocations"));
  fs::path out = dir_ / "out";
  Result r = run({bin, "run", suite, "--simulate", "--out", out.string()}, dir_, dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::string footprint_log = read_file(out / "jobs" / "counts__footprint" / "attempt-0.log");
  std::string allocations_log = read_file(out / "jobs" / "counts__allocations" / "attempt-0.log");
  EXPECT_NE(footprint_log.find("step 3 batch 8 "), std::string::npos) << footprint_log;
  EXPECT_NE(allocations_log.find("step 3 batch 16 "), std::string::npos) << allocations_log;
  nlohmann::json results = load_json(out / "results.json");
  auto jobs = jobs_by_name(results);
  // The peak the report shows includes the context under a footprint cap, and stays under the cap.
  uint64_t footprint_peak = (*jobs.at("footprint"))["peak"]["0"].get<uint64_t>();
  uint64_t allocations_peak = (*jobs.at("allocations"))["peak"]["0"].get<uint64_t>();
  EXPECT_GE(footprint_peak, uint64_t{40} << 20);
  EXPECT_LE(footprint_peak, uint64_t{64} << 20);
  EXPECT_LE(allocations_peak, uint64_t{64} << 20);
}

// The environment's versions are asked beside the jobs: a python3 that takes 3 s to say torch's version
// (as a real one takes seconds to import torch) holds no job back, and its answer still reaches the results.
TEST_F(E2E, JobsDoNotWaitForTheEnvironmentToBeDetected) {
  NEED("APP_E2E_BIN", bin);
  fs::path fake = dir_ / "fakebin";
  fs::create_directories(fake);
  std::ofstream(fake / "python3") << "#!/bin/sh\ncase \"$*\" in *'import torch'*) sleep 3; echo 9.9.9;; *) echo job-ran;; esac\n";
  fs::permissions(fake / "python3", fs::perms::owner_all);
  // On the CPU driver double without the probe: nothing in the job reports torch's version, so python3 is asked
  // (Note [Torch's version from the jobs] in run_command.cpp).
  std::string suite = write_suite(dir_, "env", "  - {name: py, run: python3 train.py, timeout: 60s, probe: none, device: gpu}\n");
  const char* path = std::getenv("PATH");
  const double launched = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  Result r = run({bin, "run", suite, "--simulate", "--out", (dir_ / "out").string()}, dir_, dir_,
                 {"PATH=" + fake.string() + ":" + (path ? path : "/usr/bin:/bin")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json results = load_json(dir_ / "out" / "results.json");
  EXPECT_EQ(results["environment"]["frameworks"]["torch"], "9.9.9");
  const auto& job = *jobs_by_name(results).at("py");
  EXPECT_LT(job["start"].get<double>() - launched, 2.5) << "the job waited for the 3 s detection";
}

// A job whose probe reports torch's version (its probe_start event) names the torch of the results, and
// python3 is never asked: asking it imports torch again beside the job (seconds of CPU), and the answer
// could name another Python's torch (Note [Torch's version from the jobs] in run_command.cpp).
TEST_F(E2E, TorchVersionComesFromTheJobsProbeNotFromAnotherPython) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_EMIT", emit);  // seals the line as the probe would (Note [Sealed event lines])
  fs::path fake = dir_ / "fakebin";
  fs::create_directories(fake);
  const fs::path asked = dir_ / "python3-was-asked";
  std::ofstream(fake / "python3")
      << "#!/bin/sh\ncase \"$*\" in *'import torch'*) touch '" << asked.string() << "'; echo 9.9.9;; "
      << "*) printf '{\"t\":1,\"pid\":%d,\"src\":\"probe\",\"kind\":\"probe_start\",\"fields\":{\"framework\":\"torch\","
         "\"version\":\"7.7.7+job\",\"allocator\":\"native\"}}\\n' $$ | '" << emit << "' emit; echo job-ran;; esac\n";
  fs::permissions(fake / "python3", fs::perms::owner_all);
  std::string suite = write_suite(dir_, "env", "  - {name: py, run: python3 train.py, timeout: 60s, device: gpu}\n");
  const char* path = std::getenv("PATH");
  Result r = run({bin, "run", suite, "--simulate", "--out", (dir_ / "out").string()}, dir_, dir_,
                 {"PATH=" + fake.string() + ":" + (path ? path : "/usr/bin:/bin")});
  nlohmann::json results = load_json(dir_ / "out" / "results.json");
  EXPECT_EQ(results["environment"]["frameworks"]["torch"], "7.7.7+job") << r.out << r.err;
  EXPECT_FALSE(fs::exists(asked)) << "python3 was asked for torch's version although the job's probe said it";
}

// Note [The cap, visible] in runner/src/app/results_builder.cpp: a capped job's results and terminal say
// what the fixed part took at the first step and what the cap left for the batch; an uncapped job says
// nothing of it. The job writes the probe's breakdowns itself (as the probe does at a step's peak).
TEST_F(E2E, CappedJobSaysWhatTheFixedPartTookAndWhatWasLeft) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_EMIT", emit);  // seals the lines as the probe would (Note [Sealed event lines])
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  const std::string breakdown =
      "printf '{\"t\":1,\"pid\":1,\"src\":\"probe\",\"kind\":\"memory_breakdown\",\"fields\":{\"at\":\"peak\",\"step\":%d,"
      "\"phase\":\"%s\",\"parameters\":%d,\"gradients\":%d,\"optimizer_state\":%d,\"workspace\":33554432,\"other\":1024}}}}\\n' ";
  // (`}}` is a literal `}` in a job's command: {workdir} and the like are substituted there.)
  // Step 1's forward (no gradients yet) and its optimizer phase (all of them), then step 2 with more: the
  // first step's largest fixed part counts, 16 + 16 + 32 + 32 MiB = 96 MiB.
  const std::string to_log = " | '" + emit + "' emit";
  const std::string script = breakdown + "1 forward 16777216 0 0" + to_log + "; " + breakdown +
                             "1 optimizer 16777216 16777216 33554432" + to_log + "; " + breakdown +
                             "2 optimizer 16777216 16777216 67108864" + to_log;
  Result capped = run({bin, "exec", "--simulate", "--device", "gpu", "--cap", "128MiB", "--name", "capped", "--", "sh", "-c", script},
                      dir_, dir_);
  nlohmann::json results = load_json(dir_ / "oomh-exec" / "results.json");
  const auto& job = *jobs_by_name(results).at("capped");
  const std::string want =
      "cap 128.00 MiB: at step 1 (counted from 1) the fixed part took 96.00 MiB (parameters 16.00 MiB, "
      "gradients 16.00 MiB, optimizer state 32.00 MiB, workspaces 32.00 MiB), leaving 32.00 MiB for the batch "
      "(activations and the rest)";
  EXPECT_EQ(job.value("cap_use", ""), want) << capped.out << capped.err;
  EXPECT_NE(capped.out.find("    " + want), std::string::npos) << capped.out;

  Result over = run({bin, "exec", "--simulate", "--device", "gpu", "--cap", "64MiB", "--name", "over", "--", "sh", "-c", script},
                    dir_, dir_);
  nlohmann::json over_results = load_json(dir_ / "oomh-exec" / "results.json");
  const auto& over_job = *jobs_by_name(over_results).at("over");
  EXPECT_NE(over_job.value("cap_use", "").find("the fixed part took 96.00 MiB"), std::string::npos) << over.out;
  EXPECT_NE(over_job.value("cap_use", "").find("more than the cap by 32.00 MiB: nothing was left for the batch"),
            std::string::npos) << over.out;

  Result uncapped = run({bin, "exec", "--simulate", "--device", "gpu", "--name", "free", "--", "sh", "-c", script}, dir_, dir_);
  nlohmann::json free_results = load_json(dir_ / "oomh-exec" / "results.json");
  const auto& free_job = *jobs_by_name(free_results).at("free");
  EXPECT_FALSE(free_job.contains("cap_use")) << uncapped.out;
  EXPECT_EQ(uncapped.out.find("the fixed part took"), std::string::npos) << uncapped.out;
}

// Every process whose command line mentions `needle` (our temporary folder): what a run may leave behind.
std::vector<std::string> processes_mentioning(const std::string& needle) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file(e.path() / "cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(needle) != std::string::npos && cmdline.find("oomharness") == std::string::npos)
      found.push_back(name + ": " + cmdline);
  }
  return found;
}

TEST_F(E2E, InterruptWritesResultsSoFarAndLeavesNothingBehind) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  // Three long jobs, one at a time; each names our folder (its checkpoint) so that leftovers can be found.
  std::string jobs;
  for (int i = 0; i < 3; ++i)
    jobs += trainer_job(trainer, "long" + std::to_string(i), "checkpoint", 2000,
                        "    restart: {max: 1}\n", 20);
  const std::string checkpoint = "\"--checkpoint\", \"" + (dir_ / "ckpt").string() + "\", ";
  for (size_t p = 0; (p = jobs.find("\"--step-ms\"", p)) != std::string::npos; p += checkpoint.size() + 11)
    jobs.insert(p, checkpoint);
  std::string suite = write_suite(dir_, "long", jobs);
  fs::path out = dir_ / "out";
  Child c = spawn({bin, "run", suite, "--simulate", "--out", out.string()}, dir_, dir_);
  // Wait until the first job is running (its work folder exists and steps go by), then Ctrl-C.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ASSERT_EQ(kill(c.pid, SIGINT), 0);
  Result r = wait_for(c, 60);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  nlohmann::json results = load_json(out / "results.json");
  ASSERT_FALSE(results.is_discarded()) << r.out << r.err;
  EXPECT_EQ(results["interrupted"], true);
  auto found = jobs_by_name(results);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ((*found.at("long0"))["status"], "interrupted");
  EXPECT_EQ((*found.at("long2"))["status"], "interrupted");  // never started
  EXPECT_NE(r.out.find("interrupted"), std::string::npos) << r.out;

  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(processes_mentioning(dir_.string()).empty()) << processes_mentioning(dir_.string()).front();
  std::string prefix = "oomh-" + std::to_string(c.pid) + "-";
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << "left behind: " << e.path();
}

// Statuses, verdicts and the step sequence of each job, from a results file.
std::map<std::string, std::string> fingerprint(const nlohmann::json& results) {
  std::map<std::string, std::string> out;
  for (const auto& [name, job] : jobs_by_name(results)) {
    std::ostringstream s;
    s << (*job)["status"].get<std::string>() << " |";
    for (const auto& v : (*job)["verdicts"]) s << " " << v["policy"].get<std::string>() << "=" << v["status"].get<std::string>();
    s << " |";
    for (const auto& a : (*job)["attempts"]) s << " " << a["outcome"].get<std::string>() << "@" << a["last_step"];
    s << " |";
    for (const auto& m : (*job)["markers"])
      if (m["kind"] == "step" || m["kind"] == "oom") s << " " << m["attempt"] << ":" << m["label"].get<std::string>();
    out[name] = s.str();
  }
  return out;
}

TEST_F(E2E, FourJobsAtOnceGiveTheSameResultsAsOne) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  const char* expect = "    expect:\n      - batch_halving: {factor: 0.5, min: 2}\n";
  std::string jobs = trainer_job(trainer, "halve_a", "halve", 8, std::string(kFaultAtStep3) + expect) +
                     trainer_job(trainer, "halve_b", "halve", 5, std::string(kFaultAtStep3) + expect) +
                     trainer_job(trainer, "none_a", "none", 6, std::string(kFaultAtStep3) + expect) +
                     trainer_job(trainer, "clean", "none", 4, "    expect:\n      - exit: 0\n");
  std::string suite = write_suite(dir_, "par", jobs);
  Result one = run({bin, "run", suite, "--simulate", "--jobs", "1", "--out", (dir_ / "one").string()}, dir_, dir_);
  Result four = run({bin, "run", suite, "--simulate", "--jobs", "4", "--out", (dir_ / "four").string()}, dir_, dir_);
  EXPECT_EQ(one.code, 1) << one.out << one.err;
  EXPECT_EQ(four.code, one.code) << four.out << four.err;
  auto a = fingerprint(load_json(dir_ / "one" / "results.json"));
  auto b = fingerprint(load_json(dir_ / "four" / "results.json"));
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.at("halve_a").find("step"), std::string::npos) << a.at("halve_a");
}

TEST_F(E2E, ExecWithCapAndFault) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  fs::path out = dir_ / "out";
  std::ofstream(dir_ / "step-summary.md") << "earlier step\n";
  Result r = run({bin, "exec", "--simulate", "--summary", "--cap", "64MiB", "--fault", "step=2,times=1", "--expect", "exit=0",
                  "--expect", "batch_halving:min=2", "--out", out.string(), "--", trainer, "--steps", "5",
                  "--batch-size", "16", "--bytes-per-sample", "65536", "--recovery", "halve", "--min-batch", "2",
                  "--leak-per-step", "4096", "--step-ms", "5"},
                 dir_, dir_, {"GITHUB_STEP_SUMMARY=" + (dir_ / "step-summary.md").string()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json results = load_json(out / "results.json");
  ASSERT_FALSE(results.is_discarded());
  auto found = jobs_by_name(results);
  ASSERT_EQ(found.size(), 1u);
  const auto& job = *found.begin()->second;
  EXPECT_EQ(job["status"], "passed") << job.dump(2).substr(0, 3000);
  ASSERT_FALSE(job["faults"].empty());
  EXPECT_EQ(job["faults"][0]["rule"], "step=2,times=1");
  EXPECT_EQ(job["faults"][0]["step"], 2);
  bool capped = false;
  for (const auto& [device, points] : job["timeline"].items())
    for (const auto& p : points) capped = capped || p["cap"] == 64ull << 20;
  EXPECT_TRUE(capped) << job["timeline"].dump().substr(0, 2000);
  std::string summary = read_file(dir_ / "step-summary.md");
  EXPECT_EQ(summary.rfind("earlier step\n", 0), 0u);  // appended, not replaced
  EXPECT_NE(summary.find("1 passed"), std::string::npos) << summary;

  // Without a fault the trainer stays under the cap and passes; with too small a cap it fails.
  Result tight = run({bin, "exec", "--simulate", "--cap", "256KiB", "--out", (dir_ / "tight").string(), "--", trainer,
                      "--steps", "3", "--batch-size", "16", "--bytes-per-sample", "65536", "--recovery", "none"},
                     dir_, dir_);
  EXPECT_EQ(tight.code, 1) << tight.out << tight.err;
}

// The verdict of check `policy` in a job of a results file; null when it is not there.
nlohmann::json verdict_of(const nlohmann::json& job, const std::string& policy) {
  for (const auto& v : job["verdicts"])
    if (v["policy"] == policy) return v;
  return nullptr;
}

// Issue 11, item 7: the correct retry trainer under the persistent fault docs/policies.md recommends was
// failed with "empty_cache freed nothing": its second OOM in a row found the cache its first empty_cache
// had emptied. What the cache held free before each call now comes with the event.
TEST_F(E2E, EmptyCacheRetryPassesWhenTheCacheWasAlreadyEmpty) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  fs::path out = dir_ / "out";
  Result r = run({bin, "exec", "--simulate", "--fault", "step=5,times=2", "--expect", "empty_cache_retry", "--out",
                  out.string(), "--", trainer, "--steps", "8", "--batch-size", "32", "--bytes-per-sample", "65536",
                  "--recovery", "retry", "--leak-per-step", "4096"},
                 dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json results = load_json(out / "results.json");
  auto found = jobs_by_name(results);
  ASSERT_EQ(found.size(), 1u);
  nlohmann::json v = verdict_of(*found.begin()->second, "empty_cache_retry");
  ASSERT_FALSE(v.is_null()) << found.begin()->second->dump(2).substr(0, 3000);
  EXPECT_EQ(v["status"], "pass") << v["reason"];
  EXPECT_NE(v["reason"].get<std::string>().find("each of the 2 OOMs was followed by an empty_cache, which freed"),
            std::string::npos) << v["reason"];
  EXPECT_NE(v["reason"].get<std::string>().find("the cache held no free blocks before 1 of them"), std::string::npos)
      << v["reason"];
}

// A correct retry and a retry inside the except block (the failed attempt's blocks still referenced) under
// four step faults, over a trainer whose allocator retries once by itself as PyTorch's does (--like-pytorch).
// The fault hits step 5's backward pass, while its forward activations (2 MiB) are held.
TEST_F(E2E, EmptyCacheRetryOfACorrectAndABrokenRetryUnderEachFault) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  const std::vector<std::pair<std::string, std::string>> faults = {
      {"times-1", "{times: 1}"}, {"times-2", "{times: 2}"}, {"until-freed", "{until_freed: 1MiB}"}, {"forever", "{forever: true}"}};
  std::string jobs;
  for (const auto& [fault, fail] : faults)
    for (const std::string trainer_kind : {"correct", "in-except"}) {
      std::vector<std::string> flags = {"--like-pytorch"};
      if (trainer_kind == "in-except") flags.push_back("--retry-in-except");
      jobs += trainer_job(trainer, trainer_kind + "-" + fault, "retry", 8,
                          "    faults:\n      - {name: oom-at-5, when: {step: 5, phase: backward}, fail: " + fail + "}\n"
                          "    expect:\n      - empty_cache_retry: {max_retries: 3}\n",
                          5, flags);
    }
  std::string suite = write_suite(dir_, "retry", jobs);
  fs::path out = dir_ / "out";
  Result r = run({bin, "run", suite, "--simulate", "--out", out.string()}, dir_, dir_);
  EXPECT_EQ(r.code, 1) << r.out << r.err;  // the jobs that must fail did
  nlohmann::json results = load_json(out / "results.json");
  auto found = jobs_by_name(results);
  ASSERT_EQ(found.size(), 8u);
  struct Want {
    const char* status;
    const char* phrase;
    bool held;  // the fail sentence says the code still held the failed attempt's blocks
  };
  const std::map<std::string, Want> want = {
      // One failure: the allocator's own retry absorbs it; nothing to judge.
      {"correct-times-1", {"inconclusive", "never saw an out-of-memory error", false}},
      {"in-except-times-1", {"inconclusive", "never saw an out-of-memory error", false}},
      // Two: the OOM reaches the code with the cache empty (flushed as step 5 began; the allocator's retry
      // found nothing to give back). The correct trainer drops its activations, so its empty_cache frees
      // them. The broken one holds them: its call finds the cache already empty, and its retry still works
      // because the fault is over: nothing in the trace shows harm (docs/policies.md).
      {"correct-times-2", {"pass", "followed by an empty_cache that freed 2.00 MiB", false}},
      {"in-except-times-2", {"pass", "found the cache already empty", false}},
      // Until 1 MiB is freed: only dropping the failed attempt's activations frees it.
      {"correct-until-freed", {"pass", "followed by an empty_cache that freed 2.00 MiB", false}},
      {"in-except-until-freed", {"fail", "step 5 never completed: attempt 1 exited with code 1", true}},
      // For ever: no retry can work; only the broken trainer is told it held its tensors.
      {"correct-forever", {"fail", "step 5 never completed: attempt 1 exited with code 1", false}},
      {"in-except-forever", {"fail", "step 5 never completed: attempt 1 exited with code 1", true}},
  };
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(found.count(name)) << name;
    nlohmann::json v = verdict_of(*found.at(name), "empty_cache_retry");
    ASSERT_FALSE(v.is_null()) << name;
    std::string reason = v["reason"].get<std::string>();
    EXPECT_EQ(v["status"], w.status) << name << ": " << reason;
    EXPECT_NE(reason.find(w.phrase), std::string::npos) << name << ": " << reason;
    EXPECT_EQ(reason.find("still held 2.00 MiB more than after step 4") != std::string::npos, w.held) << name << ": " << reason;
  }
}

TEST_F(E2E, ExecRejectsBadSpecsQuotingThem) {
  NEED("APP_E2E_BIN", bin);
  Result f = run({bin, "exec", "--fault", "stpe=5", "--", "true"}, dir_, dir_);
  EXPECT_EQ(f.code, 4);
  EXPECT_NE(f.err.find("bad --fault 'stpe=5': unknown key 'stpe' (did you mean 'step'?)"), std::string::npos) << f.err;
  Result e = run({bin, "exec", "--expect", "batch_halving:factr=2", "--", "true"}, dir_, dir_);
  EXPECT_EQ(e.code, 4);
  EXPECT_NE(e.err.find("bad --expect 'batch_halving:factr=2'"), std::string::npos) << e.err;
  Result c = run({bin, "exec", "--cap", "8XB", "--", "true"}, dir_, dir_);
  EXPECT_EQ(c.code, 4);
  EXPECT_NE(c.err.find("'8XB'"), std::string::npos) << c.err;
  Result none = run({bin, "exec", "--cap", "8GiB"}, dir_, dir_);
  EXPECT_EQ(none.code, 4);
  EXPECT_FALSE(fs::exists(dir_ / "oomh-out" / "results.json"));
}

TEST_F(E2E, DemoRunsSimulatedWithoutAGpu) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  if (std::system("nvidia-smi -L >/dev/null 2>&1") == 0) GTEST_SKIP() << "a GPU is here: the demo runs on it";
  fs::create_directories(dir_ / "home/suites");
  write_suite(dir_ / "home/suites", "demo-simulated",
              trainer_job(trainer, "halving", "halve", 5, std::string(kFaultAtStep3) + "    expect:\n      - batch_halving\n"));
  Result r = run({bin, "demo", "--out", (dir_ / "demo-out").string()}, dir_, dir_, {"OOMH_HOME=" + (dir_ / "home").string()});
  // Without a python3 that has torch on PATH (or at /usr/bin) the demo's PyTorch jobs are left out, and a demo
  // that did not show what it is for must not exit 0, however its other jobs went.
  if (r.out.find("No python3 that can import torch") != std::string::npos) {
    EXPECT_EQ(r.code, 5) << r.out << r.err;
    EXPECT_NE(r.err.find("the PyTorch jobs did not run (no python3 that can import torch): not a full demo"),
              std::string::npos) << r.err;
  } else {
    EXPECT_EQ(r.code, 0) << r.out << r.err;
  }
  EXPECT_NE(r.out.find("No GPU found: running the demo on stand-ins (simulated device)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HTML report: " + (dir_ / "demo-out" / "report.html").string()), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "demo-out" / "report.html"));
}

// What the terminal says while and after a run agrees with results.json: the attempts a job with a
// reference run made (the reference run is not one of them), the step each attempt completed (not the
// control block's last sample, which lags), and the end of a failed job's output under it.
TEST_F(E2E, TerminalAgreesWithTheResults) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  // Fast steps (2 ms) against 50 ms samples: the last sample is several steps behind the OOM at step 25.
  std::string resume =
      "  - name: resume\n"
      "    run: [\"" + trainer + "\", \"--steps\", \"40\", \"--batch-size\", \"16\", \"--bytes-per-sample\", \"1MiB\", "
      "\"--leak-per-step\", \"4096\", \"--step-ms\", \"2\", \"--recovery\", \"checkpoint\", \"--checkpoint\", "
      "\"{workdir}/ckpt.bin\", \"--checkpoint-every\", \"5\"]\n"
      "    timeout: 120s\n"
      "    target_step: 40\n"
      "    faults:\n      - {name: oom-at-25, when: {step: 25}, fail: {forever: true}}\n"
      "    restart: {max: 1, on: [oom], clear_faults: true}\n"
      "    expect:\n      - checkpoint_resume: {max_lost_steps: 5, reference: {metric: loss, rtol: 1e-6}}\n"
      "      - completes: 40\n";
  std::string jobs = resume + trainer_job(trainer, "no_recovery", "none", 6, std::string(kFaultAtStep3) +
                                          "    expect:\n      - batch_halving: {factor: 0.5, min: 2}\n");
  std::string suite = write_suite(dir_, "agree", jobs);
  fs::path out = dir_ / "out";
  Result r = run({bin, "run", suite, "--simulate", "--out", out.string()}, dir_, dir_);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  nlohmann::json results = load_json(out / "results.json");
  ASSERT_FALSE(results.is_discarded());
  auto found = jobs_by_name(results);
  ASSERT_EQ(found.size(), 2u);
  const auto& attempts = (*found.at("resume"))["attempts"];
  ASSERT_EQ(attempts.size(), 2u) << found.at("resume")->dump(2).substr(0, 4000);
  EXPECT_NE(r.out.find("agree::resume: attempt 1 ended after step " + std::to_string(attempts[0]["last_step"].get<int>()) +
                       ", attempt 2 starts\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("agree::resume: attempt 2 ended after step " + std::to_string(attempts[1]["last_step"].get<int>()) +
                       ", the reference run (no faults) starts\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("done   agree::resume  (2 attempts + reference run, "), std::string::npos) << r.out;

  // The failed job's last output lines, cleaned, under it in the summary.
  const auto& failed = *found.at("no_recovery");
  ASSERT_EQ(failed["status"], "failed");
  std::string tail = failed["attempts"].back()["output_tail"].get<std::string>();
  ASSERT_FALSE(tail.empty());
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  const std::string last_line = tail.substr(tail.rfind('\n') + 1);
  const size_t row = r.out.find("agree::no_recovery ");
  ASSERT_NE(row, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    output of attempt 1 (", row), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    | " + last_line + "\n", row), std::string::npos) << r.out;
}

// ---------------------------------------------------------------------------------------------------
// CLI habits (issue 18): the ways pytest users already drive a test runner.

// Three quick jobs: two that do not halve (fail) around one that does (passes); `step_ms` slows the good one.
std::string habit_suite(const fs::path& dir, const std::string& trainer, const std::string& name = "habits",
                        int good_step_ms = 5) {
  const std::string fault = std::string(kFaultAtStep3) + "    expect:\n      - batch_halving: {factor: 0.5, min: 2}\n";
  return write_suite(dir, name,
                     trainer_job(trainer, "bad1", "none", 6, fault) + trainer_job(trainer, "good", "halve", 6, fault, good_step_ms) +
                         trainer_job(trainer, "bad2", "none", 6, fault));
}

std::map<std::string, std::string> statuses(const fs::path& results) {
  std::map<std::string, std::string> out;
  nlohmann::json r = load_json(results);
  for (const auto& s : r["suites"])
    for (const auto& j : s["jobs"]) out[s["name"].get<std::string>() + "::" + j["name"].get<std::string>()] = j["status"];
  return out;
}

TEST_F(E2E, OptionsGoBeforeOrAfterSuiteFiles) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  std::string a = habit_suite(dir_, trainer, "a");
  std::string b = habit_suite(dir_, trainer, "b");
  Result r = run({bin, "run", "-k", "good", a, "--simulate", "--out", (dir_ / "out").string(), b, "-q"}, dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(statuses(dir_ / "out" / "results.json"),
            (std::map<std::string, std::string>{{"a::good", "passed"}, {"b::good", "passed"}}));
}

TEST_F(E2E, ExitFirstAndMaxfailStopStartingJobs) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  std::string suite = habit_suite(dir_, trainer);
  Result x = run({bin, "run", suite, "--simulate", "-x", "--out", (dir_ / "x").string()}, dir_, dir_);
  EXPECT_EQ(x.code, 1) << x.out << x.err;
  EXPECT_EQ(statuses(dir_ / "x" / "results.json"),
            (std::map<std::string, std::string>{{"habits::bad1", "failed"}, {"habits::good", "skipped"}, {"habits::bad2", "skipped"}}));
  EXPECT_NE(x.out.find("-> not run: 1 job failed or erred before its turn (-x)"), std::string::npos) << x.out;
  EXPECT_NE(x.out.find("1 failed, 2 skipped"), std::string::npos) << x.out;
  EXPECT_EQ(x.out.find("start  habits::good"), std::string::npos) << x.out;

  Result two = run({bin, "run", suite, "--simulate", "--maxfail", "2", "--out", (dir_ / "two").string()}, dir_, dir_);
  EXPECT_EQ(two.code, 1) << two.out << two.err;
  EXPECT_EQ(statuses(dir_ / "two" / "results.json"),
            (std::map<std::string, std::string>{{"habits::bad1", "failed"}, {"habits::good", "passed"}, {"habits::bad2", "failed"}}));

  Result zero = run({bin, "run", suite, "--simulate", "--maxfail", "0"}, dir_, dir_);
  EXPECT_EQ(zero.code, 4) << zero.out << zero.err;
  EXPECT_NE(zero.err.find("--maxfail"), std::string::npos) << zero.err;
}

// Note [Run state] in runner/src/app/run_state.h: --lf remembers per suite set, in .oomharness-cache/ of the
// folder the command runs in, across other commands (exec), -x and other output folders.
TEST_F(E2E, LastFailedRemembersAcrossExecAndExitFirst) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  std::string suite = habit_suite(dir_, trainer);
  const std::string out = (dir_ / "out").string();
  // No run of these suites yet: every job runs, as pytest's --lf does.
  Result none = run({bin, "run", suite, "--simulate", "--lf", "--out", out}, dir_, dir_);
  EXPECT_EQ(none.code, 1) << none.out << none.err;
  EXPECT_NE(none.out.find("--lf: no previous run of these suites in .oomharness-cache/lastfailed.json: running every selected job"),
            std::string::npos) << none.out;
  EXPECT_EQ(statuses(fs::path(out) / "results.json").size(), 3u);
  EXPECT_TRUE(fs::exists(dir_ / ".oomharness-cache" / "lastfailed.json"));

  // An exec in the same folder writes its own folder, and the suite's memory stays.
  Result e = run({bin, "exec", "--simulate", "--", "true"}, dir_, dir_);
  EXPECT_TRUE(fs::exists(dir_ / "oomh-exec" / "results.json")) << e.out << e.err;
  EXPECT_FALSE(fs::exists(dir_ / "oomh-out"));
  // Another output folder: the memory is the suite set's, not the folder's.
  const std::string other = (dir_ / "other").string();
  Result lf = run({bin, "run", "--lf", suite, "--simulate", "--out", other}, dir_, dir_);
  EXPECT_EQ(lf.code, 1) << lf.out << lf.err;
  EXPECT_NE(lf.out.find("--lf: rerunning 2 of the 2 jobs that failed or erred in the last runs of these suites"), std::string::npos)
      << lf.out;
  EXPECT_EQ(statuses(fs::path(other) / "results.json"),
            (std::map<std::string, std::string>{{"habits::bad1", "failed"}, {"habits::bad2", "failed"}}));

  // --lf -x stops after bad1; bad2 was skipped, not forgotten: the next --lf runs both again.
  Result x = run({bin, "run", "--lf", "-x", suite, "--simulate", "--out", out}, dir_, dir_);
  EXPECT_EQ(x.code, 1) << x.out << x.err;
  EXPECT_EQ(statuses(fs::path(out) / "results.json"),
            (std::map<std::string, std::string>{{"habits::bad1", "failed"}, {"habits::bad2", "skipped"}}));
  Result again = run({bin, "run", "--lf", suite, "--simulate", "--collect-only"}, dir_, dir_);
  EXPECT_EQ(again.code, 0) << again.out << again.err;
  EXPECT_EQ(again.out.find("habits::good"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("habits::bad1\nhabits::bad2\n2 jobs collected\n"), std::string::npos) << again.out;

  // A suite set with no failure remembered: every job runs. (Another cache folder, as another checkout has.)
  const std::string cache = "OOMH_CACHE_DIR=" + (dir_ / "cache2").string();
  Result good = run({bin, "run", suite, "-k", "good", "--simulate", "--out", out}, dir_, dir_, {cache});
  EXPECT_EQ(good.code, 0) << good.out << good.err;
  Result all = run({bin, "run", suite, "--simulate", "--lf", "--out", out}, dir_, dir_, {cache});
  EXPECT_NE(all.out.find("--lf: no job failed or erred in the last runs of these suites"), std::string::npos) << all.out;
  EXPECT_EQ(statuses(fs::path(out) / "results.json").size(), 3u);
}

// --collect-only lists what run would run (after -k and --lf), runs nothing, and exits 5 when nothing is
// selected, as pytest's does.
TEST_F(E2E, CollectOnlyListsTheSelectedJobs) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  std::string suite = habit_suite(dir_, trainer);
  Result all = run({bin, "run", suite, "--collect-only"}, dir_, dir_);
  EXPECT_EQ(all.code, 0) << all.out << all.err;
  EXPECT_EQ(all.out, "habits::bad1\nhabits::good\nhabits::bad2\n3 jobs collected\n");
  Result one = run({bin, "run", suite, "-k", "good", "--collect-only"}, dir_, dir_);
  EXPECT_EQ(one.code, 0) << one.out << one.err;
  EXPECT_EQ(one.out, "habits::good\n1 job collected\n");
  Result nothing = run({bin, "run", suite, "-k", "nosuchjob", "--collect-only"}, dir_, dir_);
  EXPECT_EQ(nothing.code, 5) << nothing.out << nothing.err;
  EXPECT_FALSE(fs::exists(dir_ / "oomh-out"));
  EXPECT_FALSE(fs::exists(dir_ / ".oomharness-cache"));
}

// After Ctrl-C, --lf runs the jobs the interrupted run did not finish (and the failed ones), not the ones
// that passed before the interrupt.
TEST_F(E2E, LastFailedAfterAnInterruptRerunsOnlyWhatDidNotFinish) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  const std::string fault = std::string(kFaultAtStep3) + "    expect:\n      - batch_halving: {factor: 0.5, min: 2}\n";
  std::string suite = write_suite(dir_, "irq",
                                  trainer_job(trainer, "quick", "halve", 6, fault) + trainer_job(trainer, "bad", "none", 6, fault) +
                                      trainer_job(trainer, "long0", "none", 4000, "", 20) +
                                      trainer_job(trainer, "long1", "none", 4000, "", 20));
  fs::path out = dir_ / "out";
  Child c = spawn({bin, "run", suite, "--simulate", "--out", out.string()}, dir_, dir_);
  // Ctrl-C once quick and bad are judged (jobs.jsonl has them) and long0 runs.
  auto judged = [&] {
    std::string lines = read_file(out / "jobs.jsonl");
    return lines.find("\"bad\"") != std::string::npos && fs::exists(out / "jobs" / "irq__long0");
  };
  for (int i = 0; i < 600 && !judged(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(judged()) << read_file(out / "jobs.jsonl");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(c.pid, SIGINT), 0);
  Result r = wait_for(c, 60);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(statuses(out / "results.json"),
            (std::map<std::string, std::string>{{"irq::quick", "passed"}, {"irq::bad", "failed"},
                                                {"irq::long0", "interrupted"}, {"irq::long1", "interrupted"}}));
  Result lf = run({bin, "run", "--lf", suite, "--collect-only"}, dir_, dir_);
  EXPECT_EQ(lf.code, 0) << lf.out << lf.err;
  EXPECT_NE(lf.out.find("--lf: rerunning 3 of the 1 job that failed or erred and 2 jobs an interrupted run did not finish"),
            std::string::npos) << lf.out;
  EXPECT_NE(lf.out.find("irq::bad\nirq::long0\nirq::long1\n3 jobs collected\n"), std::string::npos) << lf.out;
}

TEST_F(E2E, QuietAndVerbose) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  std::string suite = habit_suite(dir_, trainer);
  Result q = run({bin, "run", suite, "--simulate", "-q", "--out", (dir_ / "q").string()}, dir_, dir_);
  EXPECT_EQ(q.code, 1) << q.out << q.err;
  EXPECT_EQ(q.out.find("start  "), std::string::npos) << q.out;
  EXPECT_EQ(q.out.find("done   "), std::string::npos) << q.out;
  EXPECT_EQ(q.out.find("habits::good "), std::string::npos) << "-q lists only the jobs that did not pass\n" << q.out;
  EXPECT_NE(q.out.find("habits::bad1 "), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("==== 2 failed, 1 passed"), std::string::npos) << q.out;

  Result v = run({bin, "run", suite, "--simulate", "-v", "--out", (dir_ / "v").string()}, dir_, dir_);
  EXPECT_EQ(v.code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("start  habits::good"), std::string::npos) << v.out;
  const size_t good_row = v.out.find("habits::good ");
  ASSERT_NE(good_row, std::string::npos) << v.out;
  EXPECT_NE(v.out.find("    batch_halving: pass: ", good_row), std::string::npos) << "-v shows a passed verdict's sentence\n" << v.out;

  Result both = run({bin, "run", suite, "--simulate", "-q", "-v"}, dir_, dir_);
  EXPECT_EQ(both.code, 4) << both.out << both.err;
  Result exec_q = run({bin, "exec", "-q", "--simulate", "--out", (dir_ / "e").string(), "--", trainer, "--steps", "2",
                       "--batch-size", "4", "--bytes-per-sample", "1024"}, dir_, dir_);
  EXPECT_EQ(exec_q.code, 0) << exec_q.out << exec_q.err;
  EXPECT_EQ(exec_q.out.find("start  "), std::string::npos) << exec_q.out;
}

TEST_F(E2E, GithubActionsGetsErrorAnnotationsOnTheSuiteLine) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  std::string suite = habit_suite(dir_, trainer);
  // The jobs' entries: the `- name:` lines of bad1 and bad2.
  std::ifstream in(suite);
  std::map<std::string, int> line_of;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.rfind("  - name: ", 0) == 0) line_of[line.substr(10)] = n;
  }
  ASSERT_EQ(line_of.size(), 3u);
  Result gha = run({bin, "run", suite, "--simulate", "--out", (dir_ / "g").string()}, dir_, dir_, {"GITHUB_ACTIONS=true"});
  EXPECT_EQ(gha.code, 1) << gha.out << gha.err;
  for (const char* job : {"bad1", "bad2"}) {
    const std::string want = "::error file=" + suite + ",line=" + std::to_string(line_of[job]) + ",title=habits%3A%3A" + job +
                             " failed::habits::" + job + " failed: OOM at step 3 (batch 32) ended attempt 1";
    EXPECT_NE(gha.out.find(want), std::string::npos) << want << "\n" << gha.out;
  }
  EXPECT_EQ(gha.out.find("::error file=" + suite + ",line=" + std::to_string(line_of["good"])), std::string::npos) << gha.out;
  Result plain = run({bin, "run", suite, "--simulate", "--out", (dir_ / "p").string()}, dir_, dir_, {"GITHUB_ACTIONS=false"});
  EXPECT_EQ(plain.out.find("::error"), std::string::npos) << plain.out;
}

TEST_F(E2E, HeartbeatWhileJobsRunInNonTerminalOutput) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  // The good job takes 6 steps of 400 ms; a heartbeat every 0.5 s must show up at least three times, under -q too.
  std::string suite = habit_suite(dir_, trainer, "hb", 400);
  Result r = run({bin, "run", suite, "-k", "good", "-q", "--simulate", "--out", (dir_ / "out").string()}, dir_, dir_,
                 {"OOMH_HEARTBEAT=0.5"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::istringstream lines(r.out);
  int beats = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.size() > 11 && line[0] == '[' && line[9] == ']' && line.find("] 0/1 done, running: hb::good (") == 9) ++beats;
  EXPECT_GE(beats, 3) << r.out;
  // The default is 30 s: a short run prints none.
  Result quiet = run({bin, "run", suite, "-k", "bad1", "--simulate", "--out", (dir_ / "out2").string()}, dir_, dir_);
  EXPECT_EQ(quiet.out.find("] 0/1 done"), std::string::npos) << quiet.out;
}


// ---------------------------------------------------------------------------------------------------
// `oomharness sweep` and `budget` (issue 16, docs/sweep.md).

// Six steps: memory_stable, which every sweep run gets, needs five. The emulated trainer's step 2 (flushed: every call reaches the driver double) makes five calls in five
// sites: forward and backward activations (512 KiB each), the optimizer's temporary (64 KiB) and its
// leaked 4 KiB (--leak-per-step), and an eval pass (1 MiB, --eval-every 2).
std::vector<std::string> sweep_trainer(const std::string& trainer, const std::vector<std::string>& recovery) {
  std::vector<std::string> argv = {trainer, "--steps", "6", "--batch-size", "8", "--bytes-per-sample", "65536",
                                   "--leak-per-step", "4096", "--eval-every", "2", "--like-pytorch"};
  argv.insert(argv.end(), recovery.begin(), recovery.end());
  return argv;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(E2E, SweepFindsEverySiteOfTheStepAndACorrectRetryRecoversFromEachTransientFault) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  fs::path out = dir_ / "out";
  Result r = run(concat({bin, "sweep", "--simulate", "--step", "2", "--target-step", "6", "--jobs", "2", "--name",
                         "good", "--timeout", "60s", "--modes", "transient", "--junit", (dir_ / "junit.xml").string(),
                         "--out", out.string(), "--"},
                        sweep_trainer(trainer, {"--recovery", "retry", "--max-retries", "3"})),
                 dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json sweep = load_json(out / "sweep.json");
  ASSERT_FALSE(sweep.is_discarded());
  // Every call of the step was found: the trainer's own count (Note [Emulated training step]).
  EXPECT_EQ(sweep["calls_recorded"], 5) << sweep.dump(2);
  ASSERT_EQ(sweep["sites"].size(), 5u) << sweep.dump(2);
  std::vector<std::string> phases;
  for (const auto& s : sweep["sites"]) {
    phases.push_back(s["phase"]);
    ASSERT_EQ(s["cases"].size(), 1u);
    // Two failures in a row get past the allocator's own retry: the code sees each one and recovers.
    EXPECT_EQ(s["cases"][0]["outcome"], "recovered") << s.dump();
    EXPECT_EQ(s["cases"][0]["status"], "passed") << s.dump();
    EXPECT_EQ(s["cases"][0]["fault"], "step=2,nth=" + std::to_string(s["nth"].get<int>()) + ",times=2");
  }
  for (int nth = 1; nth <= 5; ++nth) EXPECT_EQ(sweep["sites"][nth - 1]["nth"], nth);
  EXPECT_EQ(phases, (std::vector<std::string>{"forward", "backward", "optimizer", "optimizer", "eval"}));
  EXPECT_EQ(sweep["survived"], 5);
  EXPECT_NE(r.out.find("5 sites in step 2; survived 5"), std::string::npos) << r.out;
  // The faulted runs are ordinary jobs: results.json has the 5, JUnit one testcase each.
  nlohmann::json results = load_json(out / "results.json");
  EXPECT_EQ(jobs_by_name(results).size(), 5u);
  std::string junit = read_file(dir_ / "junit.xml");
  size_t testcases = 0;
  for (size_t at = junit.find("<testcase"); at != std::string::npos; at = junit.find("<testcase", at + 1)) ++testcases;
  EXPECT_EQ(testcases, 5u);
  EXPECT_NE(junit.find("good-site03-transient"), std::string::npos);
}

TEST_F(E2E, SweepOfABrokenTrainerShowsTheSitesItDoesNotSurviveWithTheirFault) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  fs::path out = dir_ / "out";
  // Broken retry: it keeps the failed attempt's blocks (--retry-without-freeing), so a persistent fault,
  // which lasts until memory is freed, is never lifted at the backward site, where a correct retry frees
  // the forward pass's activations: it gives up and dies of the OOM.
  auto sweep_of = [&](const std::string& name, const std::vector<std::string>& recovery, const fs::path& where) {
    return run(concat({bin, "sweep", "--simulate", "--step", "2", "--target-step", "6", "--jobs", "2", "--name", name,
                       "--timeout", "60s", "--out", where.string(), "--"},
                      sweep_trainer(trainer, recovery)),
               dir_, dir_);
  };
  std::vector<std::string> broken = {"--recovery", "retry", "--retry-without-freeing"};
  Result r = sweep_of("broken", broken, out);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  nlohmann::json sweep = load_json(out / "sweep.json");
  ASSERT_FALSE(sweep.is_discarded());
  ASSERT_EQ(sweep["sites"].size(), 5u) << sweep.dump(2);
  const nlohmann::json& backward = sweep["sites"][1];
  EXPECT_EQ(backward["phase"], "backward");
  ASSERT_EQ(backward["cases"].size(), 2u);
  EXPECT_EQ(backward["cases"][1]["mode"], "persistent");
  EXPECT_EQ(backward["cases"][1]["outcome"], "crash") << backward.dump(2);
  EXPECT_EQ(backward["cases"][1]["status"], "failed");
  const std::string lost_fault = backward["cases"][1]["fault"];
  EXPECT_EQ(lost_fault, "step=2,nth=2,until_freed=1");
  EXPECT_NE(r.out.find("--fault '" + lost_fault + "'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("site 2 (backward, 512.00 KiB..1.00 MiB): transient leak, persistent crash"), std::string::npos) << r.out;
  // Note [The golden level]: after a transient fault the broken retry goes on holding the failed attempt's
  // 512 KiB; flat afterwards, so only the golden run's level shows it.
  EXPECT_EQ(backward["cases"][0]["outcome"], "leak") << backward.dump(2);
  EXPECT_NE(backward["cases"][0]["message"].get<std::string>().find("held 512.00 KiB more than the same job without faults"),
            std::string::npos) << backward.dump(2);
  EXPECT_LT(sweep["survived"].get<int>(), 4);
  std::string html = read_file(out / "sweep.html");
  EXPECT_NE(html.find("<code>--fault " + lost_fault + "</code>"), std::string::npos) << html.substr(0, 3000);

  // The correct retry survives that site. Neither survives a persistent fault at the step's first call,
  // where nothing is held that could be freed (docs/sweep.md): a GPU that is really full.
  Result good = sweep_of("good", {"--recovery", "retry"}, dir_ / "good");
  EXPECT_EQ(good.code, 1) << good.out << good.err;
  nlohmann::json good_sweep = load_json(dir_ / "good" / "sweep.json");
  ASSERT_EQ(good_sweep["sites"].size(), 5u) << good_sweep.dump(2);
  EXPECT_EQ(good_sweep["sites"][1]["cases"][1]["outcome"], "recovered") << good_sweep.dump(2);
  EXPECT_EQ(good_sweep["sites"][1]["cases"][0]["outcome"], "recovered") << good_sweep.dump(2);
  EXPECT_EQ(good_sweep["sites"][0]["cases"][1]["outcome"], "crash") << good_sweep.dump(2);
  EXPECT_EQ(good_sweep["survived"], 4);

  // The printed --fault reproduces the failure alone, through exec; the correct retry passes it.
  auto exec_with = [&](const std::vector<std::string>& recovery, const std::string& where) {
    return run(concat({bin, "exec", "--simulate", "--target-step", "6", "--expect", "completes", "--fault", lost_fault,
                       "--out", (dir_ / where).string(), "--"},
                      sweep_trainer(trainer, recovery)),
               dir_, dir_);
  };
  Result again = exec_with(broken, "again");
  EXPECT_EQ(again.code, 1) << again.out << again.err;
  Result fixed = exec_with({"--recovery", "retry"}, "fixed");
  EXPECT_EQ(fixed.code, 0) << fixed.out << fixed.err;
}

TEST_F(E2E, SweepOfTwoStepsNumbersEachStepsCallsFromOne) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  fs::path out = dir_ / "out";
  Result r = run(concat({bin, "sweep", "--simulate", "--step", "2..3", "--target-step", "6", "--jobs", "2", "--modes",
                         "transient", "--timeout", "60s", "--out", out.string(), "--"},
                        sweep_trainer(trainer, {"--recovery", "retry"})),
                 dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json sweep = load_json(out / "sweep.json");
  ASSERT_FALSE(sweep.is_discarded());
  EXPECT_EQ(sweep["steps"], nlohmann::json::array({2, 3}));
  // Step 2: forward, backward, optimizer, leak, eval; step 3 has no eval (--eval-every 2).
  EXPECT_EQ(sweep["calls_recorded"], 9) << sweep.dump(2);
  ASSERT_EQ(sweep["sites"].size(), 9u) << sweep.dump(2);
  std::vector<std::string> faults;
  for (const auto& s : sweep["sites"]) {
    faults.push_back(s["cases"][0]["fault"]);
    EXPECT_EQ(s["cases"][0]["outcome"], "recovered") << s.dump();
  }
  EXPECT_EQ(faults[5], "step=3,nth=1,times=2");
  EXPECT_EQ(faults[8], "step=3,nth=4,times=2");
  EXPECT_NE(r.out.find("9 sites in steps 2, 3; survived 9"), std::string::npos) << r.out;
}

TEST_F(E2E, SweepOfASuitesJobWithItsSweepBlock) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  std::string argv;
  for (const auto& a : sweep_trainer(trainer, {"--recovery", "retry"})) argv += (argv.empty() ? "\"" : ", \"") + a + "\"";
  // Its sweep: block says the step and the modes; the command line needs neither.
  std::string suite = write_suite(dir_, "swept",
                                  "  - name: retry\n    run: [" + argv + "]\n    target_step: 6\n    timeout: 60s\n" +
                                      "    sweep: {step: 2, modes: [transient]}\n" + std::string(kFaultAtStep3) +
                                      "  - name: other\n    run: [\"true\"]\n");
  Result valid = run({bin, "validate", suite}, dir_, dir_);
  EXPECT_EQ(valid.code, 0) << valid.err;
  fs::path out = dir_ / "out";
  Result r = run({bin, "sweep", suite, "-k", "retry", "--simulate", "--out", out.string()}, dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("the faults: of retry are left out"), std::string::npos) << r.err;
  nlohmann::json sweep = load_json(out / "sweep.json");
  ASSERT_FALSE(sweep.is_discarded());
  EXPECT_EQ(sweep["job"], "retry");
  EXPECT_EQ(sweep["steps"], nlohmann::json::array({2}));
  ASSERT_EQ(sweep["sites"].size(), 5u) << sweep.dump(2);
  EXPECT_EQ(sweep["sites"][0]["cases"].size(), 1u);  // transient only, as the block says
  EXPECT_EQ(sweep["survived"], 5);
  // Flags win over the block.
  Result both = run({bin, "sweep", suite, "-k", "retry", "--simulate", "--step", "3", "--modes", "transient,persistent",
                     "--out", (dir_ / "flags").string()},
                    dir_, dir_);
  nlohmann::json flagged = load_json(dir_ / "flags" / "sweep.json");
  EXPECT_EQ(flagged["steps"], nlohmann::json::array({3})) << both.out << both.err;
  ASSERT_FALSE(flagged["sites"].empty());
  EXPECT_EQ(flagged["sites"][0]["cases"].size(), 2u);

  Result two = run({bin, "sweep", suite, "--simulate", "--step", "2", "--out", out.string()}, dir_, dir_);
  EXPECT_EQ(two.code, 4);
  EXPECT_NE(two.err.find("2 jobs of " + suite + ": a sweep takes one job (retry, other); choose it with -k"),
            std::string::npos) << two.err;
  Result flags = run({bin, "sweep", suite, "-k", "retry", "--cap", "1GiB", "--simulate", "--step", "2"}, dir_, dir_);
  EXPECT_EQ(flags.code, 4);
  EXPECT_NE(flags.err.find("a suite's job says them in the suite"), std::string::npos) << flags.err;
  Result none = run({bin, "sweep", suite, "-k", "nosuchjob", "--simulate", "--step", "2"}, dir_, dir_);
  EXPECT_EQ(none.code, 5) << none.err;
}

// Note [A suite's sweeps]: `run` sweeps each job with a sweep: block, its faulted runs among the suite's
// other jobs in one results.json and JUnit report; a sweep that cannot be planned fails the run.
TEST_F(E2E, RunSweepsTheJobsWithASweepBlock) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  auto quoted = [&](const std::vector<std::string>& recovery) {
    std::string argv;
    for (const auto& a : sweep_trainer(trainer, recovery)) argv += (argv.empty() ? "\"" : ", \"") + a + "\"";
    return argv;
  };
  const std::string good = "  - name: retry\n    run: [" + quoted({"--recovery", "retry"}) +
                           "]\n    target_step: 6\n    timeout: 60s\n    sweep: {step: 2, modes: [transient]}\n";
  const std::string plain = "  - name: plain\n    run: [" + quoted({"--recovery", "retry"}) +
                            "]\n    target_step: 6\n    timeout: 60s\n" + std::string(kFaultAtStep3);
  std::string green = write_suite(dir_, "green", good + plain);
  Result ok = run({bin, "run", green, "--simulate", "--jobs", "2", "--junit", (dir_ / "green.xml").string(), "--out",
                   (dir_ / "green").string()},
                  dir_, dir_);
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  nlohmann::json results = load_json(dir_ / "green" / "results.json");
  std::vector<std::string> names;
  for (const auto& j : results["suites"][0]["jobs"]) names.push_back(j["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"retry-site01-transient", "retry-site02-transient", "retry-site03-transient",
                                             "retry-site04-transient", "retry-site05-transient", "plain"}));
  nlohmann::json sweep = load_json(dir_ / "green" / "sweeps" / "green" / "retry" / "sweep.json");
  EXPECT_EQ(sweep["survived"], 5) << sweep.dump(2);
  EXPECT_TRUE(fs::exists(dir_ / "green" / "sweeps" / "green" / "retry" / "golden" / "results.json"));
  std::string html = read_file(dir_ / "green" / "sweeps" / "green" / "retry" / "sweep.html");
  EXPECT_NE(html.find("href=\"../../../report.html\""), std::string::npos) << html.substr(0, 2000);
  EXPECT_NE(ok.out.find("5 sites in step 2; survived 5"), std::string::npos) << ok.out;
  std::string junit = read_file(dir_ / "green.xml");
  EXPECT_NE(junit.find("name=\"retry-site05-transient\""), std::string::npos) << junit.substr(0, 2000);

  // A broken retry leaks at the backward site (Note [The golden level]); a job whose golden run cannot pass
  // (it never reaches its target step) is not run, and the run fails even where every job run passed.
  const std::string broken = "  - name: broken\n    run: [" + quoted({"--recovery", "retry", "--retry-without-freeing"}) +
                             "]\n    target_step: 6\n    timeout: 60s\n    sweep: {step: 2, modes: [transient]}\n";
  const std::string unreachable = "  - name: unreachable\n    run: [" + quoted({"--recovery", "retry"}) +
                                  "]\n    target_step: 9\n    timeout: 60s\n    sweep: {step: 2}\n";
  std::string red = write_suite(dir_, "red", broken + plain);
  Result bad = run({bin, "run", red, "--simulate", "--out", (dir_ / "red").string()}, dir_, dir_);
  EXPECT_EQ(bad.code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("site 2 (backward, 512.00 KiB..1.00 MiB): transient leak"), std::string::npos) << bad.out;
  std::string lost = write_suite(dir_, "lost", unreachable + plain);
  Result untested = run({bin, "run", lost, "--simulate", "--out", (dir_ / "lost").string()}, dir_, dir_);
  EXPECT_EQ(untested.code, 1) << untested.out << untested.err;
  EXPECT_NE(untested.err.find("lost::unreachable's sweep: the golden run (no fault) did not pass"), std::string::npos)
      << untested.err;
  EXPECT_NE(untested.err.find("its job is not run: nothing of it was tested"), std::string::npos) << untested.err;
  nlohmann::json lost_results = load_json(dir_ / "lost" / "results.json");
  ASSERT_EQ(lost_results["suites"][0]["jobs"].size(), 1u);
  EXPECT_EQ(lost_results["suites"][0]["jobs"][0]["status"], "passed");
  // A sweep that cannot be set up stops the run before anything runs.
  std::string wrong = write_suite(dir_, "wrong", "  - name: aimless\n    run: [\"true\"]\n    sweep: {step: 2}\n" + plain);
  Result refused = run({bin, "run", wrong, "--simulate", "--out", (dir_ / "wrong").string()}, dir_, dir_);
  EXPECT_EQ(refused.code, 4) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("wrong::aimless's sweep: say what surviving means"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir_ / "wrong" / "results.json"));
}

TEST_F(E2E, SweepRejectsBadInputBeforeAnythingRuns) {
  NEED("APP_E2E_BIN", bin);
  fs::path out = dir_ / "out";
  auto sweep = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {bin, "sweep", "--simulate", "--out", out.string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", "true"});
    return run(argv, dir_, dir_);
  };
  Result no_step = sweep({"--target-step", "3"});
  EXPECT_EQ(no_step.code, 4);
  EXPECT_NE(no_step.err.find("--step is required"), std::string::npos) << no_step.err;
  Result zero = sweep({"--step", "0", "--target-step", "3"});
  EXPECT_EQ(zero.code, 4) << zero.err;
  EXPECT_NE(zero.err.find("bad --step '0': '0' is not a step (from 1)"), std::string::npos) << zero.err;
  Result backwards = sweep({"--step", "3..2", "--target-step", "3"});
  EXPECT_EQ(backwards.code, 4);
  EXPECT_NE(backwards.err.find("'3..2' goes backwards"), std::string::npos) << backwards.err;
  Result modes = sweep({"--step", "2", "--target-step", "3", "--modes", "transient,sometimes"});
  EXPECT_EQ(modes.code, 4);
  EXPECT_NE(modes.err.find("'sometimes' is not transient or persistent"), std::string::npos) << modes.err;
  Result fault = sweep({"--step", "2", "--target-step", "3", "--fault", "step=2"});
  EXPECT_EQ(fault.code, 4) << fault.err;
  Result no_goal = sweep({"--step", "2"});
  EXPECT_EQ(no_goal.code, 4);
  EXPECT_NE(no_goal.err.find("--target-step"), std::string::npos) << no_goal.err;
  Result after = sweep({"--step", "5", "--target-step", "3"});
  EXPECT_EQ(after.code, 4);
  EXPECT_NE(after.err.find("after --target-step"), std::string::npos) << after.err;
  Result times = sweep({"--step", "2", "--target-step", "3", "--transient-times", "0"});
  EXPECT_EQ(times.code, 4) << times.err;
  Result no_command = run({bin, "sweep", "--simulate", "--step", "2", "--target-step", "3"}, dir_, dir_);
  EXPECT_EQ(no_command.code, 4);
  EXPECT_NE(no_command.err.find("oomharness sweep: no command given"), std::string::npos) << no_command.err;
  EXPECT_FALSE(fs::exists(out / "golden")) << "a run started despite bad input";
  // A golden run that does not pass its checks leaves nothing to judge the sites by: said, exit 1.
  Result failing = run({bin, "sweep", "--simulate", "--step", "1", "--target-step", "2", "--expect", "exit=3", "--out",
                        out.string(), "--", "true"},
                       dir_, dir_);
  EXPECT_EQ(failing.code, 1) << failing.out << failing.err;
  EXPECT_NE(failing.err.find("the golden run (no fault) "), std::string::npos) << failing.err;
}

TEST_F(E2E, BudgetBisectsTheCapWithinItsRunBound) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  fs::path out = dir_ / "out";
  // No recovery: the job completes exactly when its peak fits. Its peak: parameters (64 KiB), the step's
  // activations and gradients held together (2 x 512 KiB), the optimizer's temporary (64 KiB) beside the
  // cached activations, and the leaked 4 KiB per step.
  Result r = run({bin, "budget", "--simulate", "--target-step", "3", "--tolerance", "16KiB", "--name", "fixed",
                  "--out", out.string(), "--", trainer, "--steps", "3", "--batch-size", "8", "--bytes-per-sample",
                  "65536", "--leak-per-step", "4096", "--recovery", "none"},
                 dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json budget = load_json(out / "budget.json");
  ASSERT_FALSE(budget.is_discarded());
  ASSERT_TRUE(budget["need"].is_number()) << budget.dump(2);
  const uint64_t need = budget["need"], low = budget["low"], peak = budget["runs"][0]["peak"];
  EXPECT_GT(peak, 1u << 20) << budget.dump(2);
  EXPECT_LE(need, peak);
  EXPECT_LE(need - low, 16u << 10);
  // The bound of issue 16: ceil(log2(range / tolerance)) + 2 runs.
  EXPECT_LE(budget["runs"].size(), budget["run_bound"].get<size_t>());
  EXPECT_EQ(budget["counting"], "allocations");
  EXPECT_EQ(budget["modelled"], true);
  // Its answer holds: the job completes at `need` and not at `low`.
  for (const auto& run_ : budget["runs"])
    if (run_["cap"].is_number()) {
      if (run_["cap"].get<uint64_t>() >= need) {
        EXPECT_TRUE(run_["completed"].get<bool>()) << run_.dump();
      } else {
        EXPECT_FALSE(run_["completed"].get<bool>()) << run_.dump();
      }
    }
  EXPECT_EQ(budget["fits_on"].size(), 6u);
  EXPECT_NE(r.out.find("Fits on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("141 GiB  yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Counting allocations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU driver double"), std::string::npos) << r.out;

  // {batch}: the largest batch that completes under a cap. Each sample holds 64 KiB twice (activations
  // and gradients) beside 64 KiB of parameters and the optimizer's 64 KiB: batch 6 needs 896 KiB.
  fs::path batch_out = dir_ / "batch";
  Result batch = run({bin, "budget", "--simulate", "--target-step", "3", "--batch-under", "960KiB", "--max-batch", "64",
                      "--out", batch_out.string(), "--", trainer, "--steps", "3", "--batch-size", "{batch}",
                      "--bytes-per-sample", "65536", "--recovery", "none"},
                     dir_, dir_);
  EXPECT_EQ(batch.code, 0) << batch.out << batch.err;
  nlohmann::json by_batch = load_json(batch_out / "budget.json");
  ASSERT_FALSE(by_batch.is_discarded());
  ASSERT_TRUE(by_batch["batch"].is_number()) << by_batch.dump(2);
  const int64_t largest = by_batch["batch"];
  EXPECT_EQ(largest, 6) << by_batch.dump(2);
  EXPECT_LE(by_batch["runs"].size(), by_batch["run_bound"].get<size_t>());
  bool saw_next = false;
  for (const auto& run_ : by_batch["runs"]) {
    EXPECT_EQ(run_["cap"], 960 << 10);
    const int64_t b = run_["batch"];
    EXPECT_EQ(run_["completed"].get<bool>(), b <= largest) << run_.dump();
    saw_next = saw_next || b == largest + 1;
  }
  EXPECT_TRUE(saw_next) << "the answer is not bracketed: " << by_batch.dump(2);
  EXPECT_NE(batch.out.find("largest batch under 960.00 KiB: 6 (batch 7 does not complete)"), std::string::npos)
      << batch.out;
  Result no_placeholder = run({bin, "budget", "--simulate", "--target-step", "3", "--batch-under", "1MiB", "--", trainer},
                              dir_, dir_);
  EXPECT_EQ(no_placeholder.code, 4);
  EXPECT_NE(no_placeholder.err.find("needs {batch} in the command"), std::string::npos) << no_placeholder.err;
  Result no_cap = run({bin, "budget", "--simulate", "--target-step", "3", "--", trainer, "--batch-size", "{batch}"},
                      dir_, dir_);
  EXPECT_EQ(no_cap.code, 4);
  EXPECT_NE(no_cap.err.find("give --batch-under CAP"), std::string::npos) << no_cap.err;

  Result bad = run({bin, "budget", "--simulate", "--target-step", "3", "--tolerance", "0", "--out", out.string(), "--",
                    trainer},
                   dir_, dir_);
  EXPECT_EQ(bad.code, 4);
  EXPECT_NE(bad.err.find("bad --tolerance"), std::string::npos) << bad.err;
  Result capped = run({bin, "budget", "--simulate", "--cap", "1GiB", "--target-step", "3", "--", trainer}, dir_, dir_);
  EXPECT_EQ(capped.code, 4);
  EXPECT_NE(capped.err.find("--cap is not for budget"), std::string::npos) << capped.err;
  Result junit = run({bin, "budget", "--simulate", "--junit", "j.xml", "--target-step", "3", "--", trainer}, dir_, dir_);
  EXPECT_EQ(junit.code, 4);
  EXPECT_NE(junit.err.find("the report flags are not for budget"), std::string::npos) << junit.err;
  Result order = run({bin, "budget", "--simulate", "--low", "2MiB", "--high", "1MiB", "--target-step", "3", "--",
                      trainer},
                     dir_, dir_);
  EXPECT_EQ(order.code, 4);
  EXPECT_NE(order.err.find("is not above --low"), std::string::npos) << order.err;
}

// Note [Fits means no OOM] (issue 40): a trainer that catches the OOM and halves its batch completes under
// caps its batch does not fit in; budget answers where the batch fits, and names the runs that recovered.
TEST_F(E2E, BudgetCountsARecoveredRunAsNotFitting) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  // The same trainer as BudgetBisectsTheCapWithinItsRunBound's batch search, but halving: batch 7 and more
  // run out under 960 KiB, halve and complete; the largest batch that fits is still 6.
  fs::path out = dir_ / "batch";
  Result batch = run({bin, "budget", "--simulate", "--target-step", "3", "--batch-under", "960KiB", "--max-batch", "64",
                      "--out", out.string(), "--", trainer, "--steps", "3", "--batch-size", "{batch}",
                      "--bytes-per-sample", "65536", "--recovery", "halve"},
                     dir_, dir_);
  EXPECT_EQ(batch.code, 0) << batch.out << batch.err;
  nlohmann::json by_batch = load_json(out / "budget.json");
  ASSERT_FALSE(by_batch.is_discarded()) << batch.out << batch.err;
  EXPECT_EQ(by_batch["batch"], 6) << by_batch.dump(2);
  bool saw_recovered = false;
  for (const auto& r : by_batch["runs"]) {
    const int64_t b = r["batch"];
    EXPECT_EQ(r["fits"].get<bool>(), b <= 6) << r.dump();
    if (b > 6) {
      // It completed, by halving: a recovered run, named with its OOM and the batch it went on at.
      EXPECT_TRUE(r["completed"].get<bool>()) << r.dump();
      EXPECT_TRUE(r["recovered"].get<bool>()) << r.dump();
      EXPECT_TRUE(r["oom"].is_string()) << r.dump();
      EXPECT_LE(r["recovered_batch"].get<int64_t>(), b / 2) << r.dump();
      saw_recovered = true;
    }
  }
  EXPECT_TRUE(saw_recovered) << by_batch.dump(2);
  EXPECT_NE(batch.out.find("largest batch under 960.00 KiB: 6 (batch 7 recovered at batch 3: it does not fit)"),
            std::string::npos) << batch.out;
  EXPECT_NE(batch.out.find("recovered at batch 3"), std::string::npos) << batch.out;

  // The cap search: the smallest cap the halving trainer fits in is the one the trainer without recovery
  // needs, not the one its halving gets through at batch 1.
  auto need_of = [&](const std::string& recovery, const fs::path& where) -> int64_t {
    Result r = run({bin, "budget", "--simulate", "--target-step", "3", "--tolerance", "16KiB", "--out", where.string(), "--",
                    trainer, "--steps", "3", "--batch-size", "8", "--bytes-per-sample", "65536", "--recovery", recovery},
                   dir_, dir_);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    nlohmann::json b = load_json(where / "budget.json");
    return b.is_discarded() || !b["need"].is_number() ? -1 : b["need"].get<int64_t>();
  };
  const int64_t none = need_of("none", dir_ / "none"), halve = need_of("halve", dir_ / "halve");
  EXPECT_GT(none, 0);
  EXPECT_EQ(halve, none) << "the halving trainer's budget counted runs that recovered as fitting";
}

// Note [A search's runs] (issue 40): a search says where it is, a timeout is a timeout (never "does not
// fit"), and Ctrl-C exits 2 saying what was found so far.
TEST_F(E2E, BudgetShowsProgressStopsAtATimeoutAndAtCtrlC) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  // {batch} is written everywhere in the command: each step sleeps 100 ms per sample, so batch 1's three
  // steps take 0.3 s and batch 33's, the first midpoint of 1..65, 9.9 s: past a 2 s timeout.
  auto slow = [&](const fs::path& where, const std::string& timeout) {
    return std::vector<std::string>{bin, "budget", "--simulate", "--target-step", "3", "--batch-under", "64MiB",
                                    "--max-batch", "64", "--timeout", timeout, "--out", where.string(), "--", trainer,
                                    "--steps", "3", "--batch-size", "{batch}", "--bytes-per-sample", "4096",
                                    "--step-ms", "{batch}00", "--recovery", "none"};
  };
  fs::path timed = dir_ / "timed";
  Result t = run(slow(timed, "2s"), dir_, dir_);
  EXPECT_EQ(t.code, 1) << t.out << t.err;
  EXPECT_NE(t.out.find("budget: run 1 (at most 6 more after it), "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("so far: batch 1 under 64.00 MiB"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("budget: run 1: fits"), std::string::npos) << t.out;
  EXPECT_NE(t.err.find("the search stopped when run 2 (batch 33 under 64.00 MiB) timed out after"), std::string::npos)
      << t.err;
  nlohmann::json b = load_json(timed / "budget.json");
  ASSERT_FALSE(b.is_discarded()) << t.out << t.err;
  EXPECT_TRUE(b["cut_short"].is_string()) << b.dump(2);
  EXPECT_EQ(b["batch"], 1) << b.dump(2);  // what was found so far
  EXPECT_EQ(b["runs"].size(), 2u) << b.dump(2);
  EXPECT_EQ(b["runs"][1]["timed_out"], true) << b.dump(2);
  EXPECT_EQ(t.out.find("does not complete"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("so far: batch 1 fits under 64.00 MiB"), std::string::npos) << t.out;

  // Ctrl-C during the second run: exit 2, the search cut short, what it found so far.
  fs::path cut = dir_ / "cut";
  Child c = spawn(slow(cut, "60s"), dir_, dir_);
  for (int i = 0; i < 300 && read_file(c.out).find("budget: run 2 ") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(c.pid, SIGINT), 0);
  Result r = wait_for(c, 60);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("the search was cut short by an interrupt during run 2 (batch 33 under 64.00 MiB)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.out.find("so far: batch 1 fits under 64.00 MiB"), std::string::npos) << r.out;
  nlohmann::json cb = load_json(cut / "budget.json");
  ASSERT_FALSE(cb.is_discarded()) << r.out << r.err;
  EXPECT_EQ(cb["batch"], 1) << cb.dump(2);
}

// A sweep says which site it is at, and how many runs are left (issue 40).
TEST_F(E2E, SweepShowsEachRunAsItIsJudged) {
  NEED("APP_E2E_BIN", bin);
  NEED("APP_E2E_TRAINER", trainer);
  NEED("APP_E2E_INJECT", inject);
  NEED("APP_E2E_DOUBLE", dbl);
  Result r = run({bin, "sweep", "--simulate", "--step", "2", "--target-step", "5", "--modes", "transient", "--out",
                  (dir_ / "sweep").string(), "--", trainer, "--steps", "5", "--batch-size", "8", "--bytes-per-sample",
                  "65536", "--like-pytorch", "--recovery", "retry"},
                 dir_, dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("sweep: site 1 of "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" runs done, 0 left, "), std::string::npos) << r.out;

  // Ctrl-C once the faulted runs go: exit 2, the sweep says it was cut short, and the coverage of what ran.
  fs::path out = dir_ / "cut";
  Child c = spawn({bin, "sweep", "--simulate", "--step", "2", "--target-step", "5", "--modes", "transient", "--out",
                   out.string(), "--", trainer, "--steps", "5", "--batch-size", "8", "--bytes-per-sample", "65536",
                   "--like-pytorch", "--recovery", "retry", "--step-ms", "400"},
                  dir_, dir_);
  for (int i = 0; i < 400 && read_file(c.out).find("faulted runs\n") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(c.pid, SIGINT), 0);
  Result cut = wait_for(c, 60);
  EXPECT_EQ(cut.code, 2) << cut.out << cut.err;
  EXPECT_NE(cut.err.find("oomharness sweep: the sweep was cut short by an interrupt after "), std::string::npos)
      << cut.err;
  EXPECT_NE(cut.out.find("Sweep of step 2"), std::string::npos) << cut.out;
}

}  // namespace
