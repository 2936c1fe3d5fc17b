// Note [Ranks on several nodes] in node_group.h.

#include "exec/node_group.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "oomharness/runner/agent_plan.h"
#include "suite/torchrun_command.h"

namespace oomh::exec {

namespace fs = std::filesystem;

namespace {

double mono() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

constexpr double kWaitStep = 0.05;  // seconds between looks at the shared folder while waiting

}  // namespace

NodeGroup::NodeGroup(Setup s) : s_(std::move(s)) {
  std::error_code ec;
  fs::create_directories(s_.dir, ec);
  last_look_ = 0;
  // A node that never beats is counted silent from here.
  for (int k = 0; k < s_.nodes; ++k)
    if (k != s_.node) seen_[k] = Seen{"", mono()};
}

bool one_torchrun_per_node(const JobSpec& job) { return job.nodes > 1 && suite::torchrun_command(job.argv).has_value(); }

std::string NodeGroup::path(const std::string& name) const { return (fs::path(s_.dir) / name).string(); }

std::string NodeGroup::describe(int node) const {
  std::string host = node >= 0 && node < static_cast<int>(s_.hosts.size()) ? s_.hosts[static_cast<size_t>(node)] : "";
  int first = node * s_.ranks_per_node, last = first + s_.ranks_per_node - 1;
  return (host.empty() ? "node " + std::to_string(node + 1) : host) + " (node " + std::to_string(node + 1) + " of " +
         std::to_string(s_.nodes) + ", " + (first == last ? "rank " + std::to_string(first) : "ranks " + std::to_string(first) + "-" + std::to_string(last)) + ")";
}

std::optional<std::string> NodeGroup::beat() {
  double t = mono();
  if (t - last_beat_ >= 1) {
    last_beat_ = t;
    write_text_atomic(path("alive.node-" + std::to_string(s_.node)), std::to_string(++beats_) + "\n");
  }
  if (lost_) return lost_;
  if (t - last_look_ < 0.5) return std::nullopt;
  last_look_ = t;
  for (auto& [k, seen] : seen_) {
    std::string text = read_file(path("alive.node-" + std::to_string(k))).value_or("");
    if (text != seen.text) {
      seen.text = text;
      seen.since = t;
    } else if (t - seen.since > kNodeSilence) {
      lost_ = describe(k) + " disappeared: its node agent has written no heartbeat for " +
              std::to_string(static_cast<int>(kNodeSilence)) + " s" +
              (seen.text.empty() ? " (it never wrote one)" : "") +
              " (its slurmd or its tasks were killed, or the node went down); the ranks on the other nodes were stopped. "
              "This is a node failure, not an out-of-memory error";
      return lost_;
    }
  }
  return std::nullopt;
}

std::optional<std::string> NodeGroup::start(const std::string& key, const std::function<void()>& prepare, const std::atomic<bool>& stop) {
  const std::string go = path(key + ".go");
  if (s_.node == 0) {
    if (prepare) prepare();
    if (auto w = write_text_atomic(go, "go\n")) return "cannot write " + go + ": " + *w;
    return std::nullopt;
  }
  for (;;) {
    std::error_code ec;
    if (fs::exists(go, ec)) return std::nullopt;
    if (auto lost = beat()) return lost;
    if (stop.load()) return std::string(kGroupInterrupted);
    std::this_thread::sleep_for(std::chrono::duration<double>(kWaitStep));
  }
}

void NodeGroup::publish_end(const std::string& key, int rank, bool oom) {
  nlohmann::json j = {{"rank", rank}, {"oom", oom}};
  write_text_atomic(path(key + ".end.node-" + std::to_string(s_.node)), j.dump());
}

std::optional<NodeGroup::End> NodeGroup::remote_end(const std::string& key) {
  for (int k = 0; k < s_.nodes; ++k) {
    if (k == s_.node) continue;
    auto text = read_file(path(key + ".end.node-" + std::to_string(k)));
    if (!text) continue;
    try {
      auto j = nlohmann::json::parse(*text);
      return End{j.at("rank").get<int>(), j.at("oom").get<bool>(), k};
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

void NodeGroup::publish_hang(const std::string& key, int rank) {
  write_text_atomic(path(key + ".hang.node-" + std::to_string(s_.node)), std::to_string(rank) + "\n");
}

std::optional<int> NodeGroup::hang_elsewhere(const std::string& key) {
  for (int k = 0; k < s_.nodes; ++k) {
    if (k == s_.node) continue;
    std::error_code ec;
    if (fs::exists(path(key + ".hang.node-" + std::to_string(k)), ec)) return k;
  }
  return std::nullopt;
}

std::optional<std::string> NodeGroup::exchange(const std::string& key, const std::vector<RankPart>& mine, std::vector<RankPart>& all,
                                               const std::atomic<bool>& stop) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankPart& p : mine) out.push_back({{"rank", p.rank}, {"attempt", p.attempt}, {"stacks", p.stacks}});
  const std::string me = path(key + ".ranks.node-" + std::to_string(s_.node) + ".json");
  if (auto w = write_text_atomic(me, out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)))
    return "cannot write " + me + ": " + *w;
  std::map<int, std::vector<RankPart>> got;
  got[s_.node] = mine;
  while (static_cast<int>(got.size()) < s_.nodes) {
    for (int k = 0; k < s_.nodes; ++k) {
      if (got.count(k)) continue;
      auto text = read_file(path(key + ".ranks.node-" + std::to_string(k) + ".json"));
      if (!text) continue;
      try {
        std::vector<RankPart> parts;
        for (const auto& item : nlohmann::json::parse(*text)) {
          RankPart p;
          p.rank = item.at("rank").get<int>();
          p.attempt = item.at("attempt").get<Attempt>();
          p.stacks = item.at("stacks").get<std::string>();
          parts.push_back(std::move(p));
        }
        got[k] = std::move(parts);
      } catch (const std::exception& e) {
        return describe(k) + " wrote ranks that cannot be read (" + e.what() + ")";
      }
    }
    if (static_cast<int>(got.size()) == s_.nodes) break;
    if (auto lost = beat()) return lost;
    if (stop.load()) return std::string(kGroupInterrupted);
    std::this_thread::sleep_for(std::chrono::duration<double>(kWaitStep));
  }
  all.clear();
  for (auto& [k, parts] : got)
    for (RankPart& p : parts) all.push_back(std::move(p));
  std::sort(all.begin(), all.end(), [](const RankPart& a, const RankPart& b) { return a.rank < b.rank; });
  return std::nullopt;
}

}  // namespace oomh::exec
