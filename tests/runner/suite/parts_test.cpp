// The suite loader's parts on their own: shell words, templates, matrix expansion, suggestions.

#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "oomharness/runner/suite.h"
#include "suite/limits.h"
#include "suite/matrix.h"
#include "suite/names.h"
#include "suite/shell_words.h"
#include "suite/templates.h"
#include "suite/torchrun_command.h"

namespace oomh::suite {
namespace {

using Words = std::vector<std::string>;

TEST(ShellWords, SplitsOnWhitespaceAndHonoursQuotes) {
  EXPECT_EQ(split_shell_words("python  train.py\t--steps 12").value(), (Words{"python", "train.py", "--steps", "12"}));
  EXPECT_EQ(split_shell_words("echo 'a b' \"c d\" e\\ f").value(), (Words{"echo", "a b", "c d", "e f"}));
  EXPECT_EQ(split_shell_words("x 'it''s' \"say \\\"hi\\\" \\\\ \\n\"").value(), (Words{"x", "its", "say \"hi\" \\ \\n"}));
  EXPECT_EQ(split_shell_words("a '' \"\" b").value(), (Words{"a", "", "", "b"}));
  EXPECT_EQ(split_shell_words("--pattern='step (\\d+)'").value(), (Words{"--pattern=step (\\d+)"}));
  EXPECT_EQ(split_shell_words("a 'x|y;z' \"p>q\" \\|").value(), (Words{"a", "x|y;z", "p>q", "|"}));
  EXPECT_EQ(split_shell_words("line\\\ncontinued").value(), (Words{"linecontinued"}));
  EXPECT_TRUE(split_shell_words("   ").value().empty());
}

// Note [A command that starts torchrun]: the one reader of a command for torchrun.
TEST(TorchrunCommand, FindsTorchrunInArgvAndInShellText) {
  auto sh = [](const std::string& text) { return Words{"/bin/sh", "-c", text}; };
  auto tr = torchrun_command({"torchrun", "--nnodes=2", "--nproc-per-node", "4", "train.py", "--nnodes", "9"});
  ASSERT_TRUE(tr);
  EXPECT_EQ(tr->nnodes, "2");
  EXPECT_EQ(tr->nproc_per_node, "4") << "the script's own --nnodes is not torchrun's";
  tr = torchrun_command({"/usr/bin/python3.11", "-u", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "t.py"});
  ASSERT_TRUE(tr);
  EXPECT_TRUE(tr->standalone);
  EXPECT_EQ(tr->nproc_per_node, "2");
  EXPECT_FALSE(tr->nnodes);
  tr = torchrun_command(sh("echo \"host $(hostname)\"; exec env A=1 python3 -m torch.distributed.run --nnodes=$SLURM_NNODES "
                           "--nproc_per_node=2 --node_rank=$SLURM_NODEID --master_addr=$MASTER_ADDR train.py"));
  ASSERT_TRUE(tr);
  EXPECT_EQ(tr->nnodes, "$SLURM_NNODES");
  EXPECT_EQ(tr->nproc_per_node, "2");
  EXPECT_TRUE(torchrun_command(sh("cd /x && OMP_NUM_THREADS=1 /opt/bin/torchrun --nnodes 2 t.py")));
  for (const Words& w : {Words{"python3", "train.py", "--launcher", "torchrun"}, Words{"python3", "-m", "torch.distributed.launch", "t.py"},
                         Words{"python3", "-c", "import torch.distributed.run"}, Words{"mytorchrun", "t.py"},
                         sh("echo torchrun; python3 train.py"), sh("echo 'torchrun --nnodes 2'")})
    EXPECT_FALSE(torchrun_command(w)) << w.back();
}

TEST(TorchrunCommand, AContradictionIsSaidAndAnUnreadableValueIsAssumed) {
  TorchrunCommand tr;
  tr.nnodes = "2";
  tr.nproc_per_node = "2";
  EXPECT_FALSE(torchrun_contradiction(tr, 2, 2, false, false));
  tr.nnodes = "$SLURM_NNODES";
  tr.nproc_per_node = "gpu";
  EXPECT_FALSE(torchrun_contradiction(tr, 2, 2, false, false)) << "not readable: assumed to be the job's";
  tr.nnodes = "1:4";
  EXPECT_FALSE(torchrun_contradiction(tr, 2, 2, false, false));
  tr.nnodes = "3";
  EXPECT_NE(torchrun_contradiction(tr, 2, 2, false, false).value_or("").find("torchrun --nnodes 3, and the job has nodes: 2"), std::string::npos);
  tr.nnodes = "2";
  tr.nproc_per_node = "4";
  EXPECT_NE(torchrun_contradiction(tr, 2, 2, false, false).value_or("").find("would start 4 ranks, not 2"), std::string::npos);
  TorchrunCommand bare;
  EXPECT_NE(torchrun_contradiction(bare, 2, 2, false, false).value_or("").find("not given --nnodes"), std::string::npos);
  EXPECT_NE(torchrun_contradiction(bare, 2, 2, true, false).value_or("").find("not given --nproc_per_node"), std::string::npos);
  EXPECT_FALSE(torchrun_contradiction(bare, 2, 2, true, true)) << "PET_NNODES, PET_NPROC_PER_NODE: torchrun's own way";
  bare.standalone = true;
  EXPECT_NE(torchrun_contradiction(bare, 2, 2, true, true).value_or("").find("--standalone"), std::string::npos);
}

TEST(ShellWords, RefusesWhatOnlyAShellUnderstands) {
  EXPECT_EQ(split_shell_words("a 'b").error().message, "unterminated single quote");
  EXPECT_EQ(split_shell_words("a \"b").error().message, "unterminated double quote");
  EXPECT_EQ(split_shell_words("a b\\").error().message, "ends with a backslash that escapes nothing");
  for (const char* s : {"a | b", "a > log", "a; b", "a && b", "echo $HOME", "ls *.py", "a `b`", "echo \"$X\"", "a # c"})
    EXPECT_NE(split_shell_words(s).error().message.find("shell: true"), std::string::npos) << s;
  // '#' inside a word is not a comment.
  EXPECT_EQ(split_shell_words("a#b").value(), (Words{"a#b"}));
}

TEST(Templates, ScansVariablesAndEscapes) {
  EXPECT_EQ(scan_template("x-{alloc}-{size}-{alloc}").value(), (Words{"alloc", "size", "alloc"}));
  EXPECT_TRUE(scan_template("awk '{{print $1}}'").value().empty());
  EXPECT_TRUE(scan_template("awk '{{print $1}}'").ok());
  EXPECT_FALSE(scan_template("{alloc").ok());
  EXPECT_FALSE(scan_template("a}b").ok());
  EXPECT_FALSE(scan_template("{not a name}").ok());
  EXPECT_FALSE(scan_template("{1x}").ok());
}

TEST(Templates, ExpandsForNamesAndForRuntime) {
  const std::map<std::string, std::string> v = {{"alloc", "expandable_segments:True"}, {"odd", "{x}"}, {"workdir", "/w"}};
  EXPECT_EQ(expand_template("t-{alloc} {{lit}}", v, false), "t-expandable_segments:True {lit}");
  // Runtime templates keep escapes and the launcher's variables, and escape braces that values bring.
  EXPECT_EQ(expand_template("{alloc} {{lit}} {workdir} {attempt}", v, true), "expandable_segments:True {{lit}} {workdir} {attempt}");
  EXPECT_EQ(expand_template("{odd}", v, true), "{{x}}");
  EXPECT_EQ(substitute_runtime(expand_template("{odd}/{workdir}", v, true), "/tmp/w", 2), "{x}//tmp/w");
}

TEST(Templates, SubstituteRuntime) {
  EXPECT_EQ(substitute_runtime("{workdir}/ckpt-{attempt}.pt", "/runs/a", 3), "/runs/a/ckpt-3.pt");
  EXPECT_EQ(substitute_runtime("{{workdir}} }} {{", "/w", 0), "{workdir} } {");
  EXPECT_EQ(substitute_runtime("no braces", "/w", 0), "no braces");
  EXPECT_EQ(substitute_runtime("{other}", "/w", 0), "{other}");
}

TEST(Matrix, CartesianProductFirstListSlowest) {
  Matrix m;
  m.axes = {{"a", {"1", "2"}}, {"b", {"x", "y", "z"}}};
  const auto c = expand(m);
  ASSERT_EQ(c.size(), 6u);
  EXPECT_EQ(c[0], (Combination{{"a", "1"}, {"b", "x"}}));
  EXPECT_EQ(c[1], (Combination{{"a", "1"}, {"b", "y"}}));
  EXPECT_EQ(c[3], (Combination{{"a", "2"}, {"b", "x"}}));
}

TEST(Matrix, ExcludeThenIncludeLikeGitHubActions) {
  // The example of GitHub's documentation for include.
  Matrix m;
  m.axes = {{"fruit", {"apple", "pear"}}, {"animal", {"cat", "dog"}}};
  m.include = {{{"color", "green"}},
               {{"color", "pink"}, {"animal", "cat"}},
               {{"fruit", "apple"}, {"shape", "circle"}},
               {{"fruit", "banana"}},
               {{"fruit", "banana"}, {"animal", "cat"}}};
  const auto c = expand(m);
  ASSERT_EQ(c.size(), 6u);
  EXPECT_EQ(c[0], (Combination{{"fruit", "apple"}, {"animal", "cat"}, {"color", "pink"}, {"shape", "circle"}}));
  EXPECT_EQ(c[1], (Combination{{"fruit", "apple"}, {"animal", "dog"}, {"color", "green"}, {"shape", "circle"}}));
  EXPECT_EQ(c[2], (Combination{{"fruit", "pear"}, {"animal", "cat"}, {"color", "pink"}}));
  EXPECT_EQ(c[3], (Combination{{"fruit", "pear"}, {"animal", "dog"}, {"color", "green"}}));
  EXPECT_EQ(c[4], (Combination{{"fruit", "banana"}}));
  EXPECT_EQ(c[5], (Combination{{"fruit", "banana"}, {"animal", "cat"}}));

  Matrix e;
  e.axes = {{"a", {"1", "2"}}, {"b", {"x", "y"}}};
  e.exclude = {{{"a", "1"}, {"b", "y"}}, {{"b", "x"}, {"a", "2"}}};
  EXPECT_EQ(expand(e), (std::vector<Combination>{{{"a", "1"}, {"b", "x"}}, {{"a", "2"}, {"b", "y"}}}));
}

TEST(Matrix, ProjectionKeepsFirstOrderAndDropsRepeats) {
  Matrix m;
  m.axes = {{"a", {"1", "2"}}, {"b", {"x", "y"}}};
  const auto p = project(expand(m), {"b"});
  EXPECT_EQ(p, (std::vector<Combination>{{{"b", "x"}}, {{"b", "y"}}}));
  EXPECT_EQ(expand(Matrix{}).size(), 1u);
}

TEST(Names, SuggestsTyposOnly) {
  EXPECT_EQ(edit_distance("tiemout", "timeout"), 1u);
  EXPECT_EQ(nearest_name("tiemout", {"timeout", "grace"}), "timeout");
  EXPECT_EQ(nearest_name("enviroment", {"env", "cwd"}), "env");
  EXPECT_EQ(nearest_name("zzz", {"env", "cwd"}), "");
  EXPECT_EQ(suggestion("zzz", {"env", "cwd"}, "keys"), " (keys: env, cwd)");
}

// The cases the pytest plugin's copy of the picker is held to as well (nearest_names.json says why it has one).
TEST(Names, SharedCases) {
  std::ifstream f(std::string(OOMH_SUITE_TEST_DIR) + "/nearest_names.json");
  ASSERT_TRUE(f) << "nearest_names.json";
  const nlohmann::json cases = nlohmann::json::parse(f).at("cases");
  ASSERT_GE(cases.size(), 10u);
  for (const nlohmann::json& c : cases) {
    const auto candidates = c.at("candidates").get<std::vector<std::string>>();
    EXPECT_EQ(nearest_name(c.at("name").get<std::string>(), candidates), c.at("nearest").get<std::string>()) << c.dump();
  }
}

// Note [One job, one folder] (issue 26): distinct names never share a folder; names a folder keeps as they
// are stay readable; the rest keep a readable prefix and a hash that is the same on every run.
TEST(FolderName, DistinctNamesNeverShareAFolder) {
  const std::vector<std::string> names = {"train ok", "train_ok", "train/ok", "train?ok", "\xE4\xB8\xAD\xE6\x96\x87",
                                          "\xE6\x97\xA5\xE6\x9C\xAC", "a b c", "a_b_c", ".", "..", "", "job",
                                          std::string(300, 'x'), std::string(300, 'x') + "y", "s::j",
                                          "a__b::c", "a::b__c", "a::b::c", "s::train ok", "s::train_ok"};
  std::set<std::string> folders;
  for (const std::string& n : names) {
    const std::string f = suite::folder_name(n);
    EXPECT_TRUE(folders.insert(f).second) << "'" << n << "' shares the folder " << f;
    EXPECT_EQ(f.find('/'), std::string::npos) << f;
    EXPECT_NE(f, ".");
    EXPECT_NE(f, "..");
    EXPECT_FALSE(f.empty());
    EXPECT_LE(f.size(), suite::kMaxFolderKeyBytes + 9);
    EXPECT_EQ(suite::folder_name(n), f) << "not stable";
  }
  // Readable: a plain name is its own folder; letters of other scripts are kept; a changed name keeps its key.
  EXPECT_EQ(suite::folder_name("train_ok"), "train_ok");
  EXPECT_EQ(suite::folder_name("bs=64.lr-3"), "bs=64.lr-3");
  EXPECT_EQ(suite::folder_name("\xE4\xB8\xAD\xE6\x96\x87"), "\xE4\xB8\xAD\xE6\x96\x87");
  EXPECT_EQ(suite::folder_name("train ok").rfind("train_ok-", 0), 0u);
  EXPECT_EQ(suite::folder_name("train ok").size(), std::string("train_ok-").size() + 8);
  EXPECT_EQ(suite::folder_key("train ok"), suite::folder_key("train_ok"));
  // The runner's qualified names: "suite::job" reads "suite__job" when that is unambiguous (a folder level
  // holds qualified names only, OUT/, or plain ones only, OUT/sweeps/SUITE/: "s__j" as a plain name is "s__j" too).
  EXPECT_EQ(suite::folder_name("counts::footprint"), "counts__footprint");
  EXPECT_NE(suite::folder_name("s::train ok"), suite::folder_name("s::train_ok"));
  EXPECT_NE(suite::folder_name("a__b::c"), suite::folder_name("a::b__c"));
  EXPECT_NE(suite::folder_name("a__b::c"), "a__b__c");
  EXPECT_NE(suite::folder_name("a::b::c"), "a__b__c");
}

}  // namespace
}  // namespace oomh::suite
