// Note [Saying what was simulated] (result.h): every report says that no GPU ran a job on the virtual CUDA
// device or the driver double, in the same words, and lists what the virtual device saw a job do that a GPU
// would not.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

constexpr const char* kDevice = "virtual CUDA device (PyTorch 1.13.1 on the CPU, caching-allocator model)";

// run.json with its first job on the virtual device (and a divergence whose words a job wrote).
RunResult on_the_virtual_device(bool every_job) {
  RunResult run = test::load_fixture("run.json");
  run.environment.virtual_device = kDevice;
  for (SuiteResult& suite : run.suites)
    for (JobResult& job : suite.jobs) {
      if (!every_job && &job != &run.suites[0].jobs[0]) continue;
      job.virtual_device = kDevice;
    }
  run.suites[0].jobs[0].divergences["attention"] = "kept its 2x4x128x128 probabilities <script>x</script>";
  run.suites[0].jobs[0].divergences["autocast"] = "CUDA autocast to float16 ran as CPU autocast to bfloat16";
  if (every_job) run.environment.simulated_device = false;
  return run;
}

TEST(SimulationNotes, SayWhatStoodInForTheGpu) {
  RunResult run = on_the_virtual_device(false);
  std::vector<std::string> notes = simulation_notes(run);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], std::string("No GPU ran 1 of these 8 jobs: it ran on the ") + kDevice +
                          ". Recovery verdicts (batch halving, empty_cache retry, checkpoint resume, leaks) are "
                          "meaningful; absolute memory figures are modelled. Confirm on a GPU before a long training.");
  EXPECT_EQ(notes[1], "device simulated (CPU driver double): the other jobs' results show the harness, not a GPU.");

  notes = simulation_notes(on_the_virtual_device(true));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("No GPU ran these 8 jobs: they ran on the virtual CUDA device"), std::string::npos);

  RunResult plain = test::load_fixture("run.json");
  notes = simulation_notes(plain);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "device simulated (CPU driver double): these results show the harness, not a GPU.");
  plain.environment.simulated_device = false;
  EXPECT_TRUE(simulation_notes(plain).empty()) << "a GPU ran every job: nothing to say";
}

TEST(SimulationNotes, ResultsKeepTheDeviceAndItsDivergences) {
  const RunResult run = on_the_virtual_device(false);
  const nlohmann::json j = run;
  EXPECT_EQ(j["environment"]["virtual_device"], kDevice);
  EXPECT_EQ(j["suites"][0]["jobs"][0]["virtual_device"], kDevice);
  EXPECT_EQ(j["suites"][0]["jobs"][0]["divergences"].size(), 2u);
  EXPECT_FALSE(j["suites"][0]["jobs"][1].contains("virtual_device"));
  EXPECT_FALSE(j["suites"][0]["jobs"][1].contains("divergences"));
  const RunResult back = j.get<RunResult>();
  EXPECT_EQ(back.suites[0].jobs[0].virtual_device, run.suites[0].jobs[0].virtual_device);
  EXPECT_EQ(back.suites[0].jobs[0].divergences, run.suites[0].jobs[0].divergences);
  EXPECT_EQ(back.environment.virtual_device, kDevice);
  EXPECT_EQ(back.virtual_device_jobs(), 1);
}

TEST(SimulationNotes, EveryFormatCarriesTheBannerAndTheDivergences) {
  const RunResult run = on_the_virtual_device(false);
  const std::string html = render_html(run, {"out"});
  EXPECT_NE(html.find("<div class=\"banner\">No GPU ran 1 of these 8 jobs"), std::string::npos);
  EXPECT_NE(html.find("<div class=\"banner\">device simulated (CPU driver double): the other jobs"), std::string::npos);
  EXPECT_NE(html.find("Where this run differs from a GPU"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;x&lt;/script&gt;"), std::string::npos) << "a job's words are escaped";
  EXPECT_EQ(html.find("<script>x</script>"), std::string::npos);

  const std::string md = render_markdown(run);
  EXPECT_NE(md.find("> **No GPU ran 1 of these 8 jobs"), std::string::npos);
  EXPECT_NE(md.find("### Where the virtual device differed from a GPU"), std::string::npos);
  EXPECT_NE(md.find("attention: kept its 2x4x128x128 probabilities"), std::string::npos);

  const std::string xml = render_junit(run);
  EXPECT_NE(xml.find(std::string("<property name=\"virtual_device\" value=\"") + kDevice + "\"/>"), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"oomharness.device_note.1\" value=\"No GPU ran 1 of these 8 jobs"),
            std::string::npos);
  EXPECT_NE(xml.find(std::string("No GPU ran this job: it ran on the ") + kDevice), std::string::npos);
  EXPECT_NE(xml.find("Differs from a GPU (autocast): CUDA autocast to float16"), std::string::npos);
}

}  // namespace
}  // namespace oomh
