// The views of a trace over ranks: an attempt's ranks merged into one (Note [Ranks] in trace.h), the
// ranks found in a job's own events (Note [Ranks seen in events]), and the innermost frame of a hung rank.

#include "oomharness/policies/trace.h"

#include <algorithm>
#include <map>
#include <set>

#include "oomharness/events.h"

namespace oomh {

// Note [Ranks] in trace.h.
int rank_of(const Event& e) {
  if (!e.fields.is_object()) return -1;
  auto it = e.fields.find("rank");
  return it != e.fields.end() && it->is_number_integer() ? static_cast<int>(it->get<int64_t>()) : -1;
}

namespace {

// How rank `rank` ended: its process's times and end from `process`, its OOM and last step from `own` (its
// events; the same attempt when the rank had a process and log of its own).
RankEnd rank_end(int rank, const Attempt& process, const Attempt& own) {
  RankEnd re;
  re.rank = rank;
  re.start = process.start;
  re.end = process.end;
  re.end_kind = process.end_kind;
  re.exit_code = process.exit_code;
  re.signal = process.signal;
  re.ended_by_oom = own.ended_by_oom();
  re.last_step = own.last_completed_step();
  re.log_path = process.log_path;
  return re;
}

}  // namespace

Attempt merge_ranks(std::vector<Attempt> ranks) {
  if (ranks.empty()) return {};
  auto failed = [](const Attempt& a) {
    return a.end_kind == AttemptEnd::failed_to_start || a.end_kind == AttemptEnd::signalled ||
           (a.end_kind == AttemptEnd::exited && a.exit_code && *a.exit_code != 0);
  };
  auto earliest = [&](auto pred) -> std::optional<size_t> {
    std::optional<size_t> best;
    for (size_t k = 0; k < ranks.size(); ++k)
      if (pred(ranks[k]) && (!best || ranks[k].end < ranks[*best].end)) best = k;
    return best;
  };
  std::optional<size_t> deciding = earliest([](const Attempt& a) { return a.end_kind == AttemptEnd::interrupted; });
  if (!deciding) deciding = earliest(failed);
  if (!deciding) deciding = earliest([](const Attempt& a) { return a.end_kind == AttemptEnd::timed_out; });
  size_t d = deciding.value_or(0);

  Attempt out;
  const Attempt& dec = ranks[d];
  out.index = dec.index;
  out.end_kind = dec.end_kind;
  out.exit_code = dec.exit_code;
  out.signal = dec.signal;
  out.oom_message = dec.oom_message;
  out.faults_enabled = dec.faults_enabled;
  out.log_path = dec.log_path;
  out.start = ranks[0].start;
  out.end = ranks[0].end;
  std::pair<uint64_t, uint64_t> unthinned_grads;  // gradient answers of the ranks whose logs were not thinned
  // The deciding rank's output first: it is the one a reader needs.
  out.output_tail = "[rank " + std::to_string(d) + "]\n" + dec.output_tail;
  for (size_t k = 0; k < ranks.size(); ++k) {
    Attempt& a = ranks[k];
    out.start = std::min(out.start, a.start);
    out.end = std::max(out.end, a.end);
    out.ranks.push_back(rank_end(static_cast<int>(k), a, a));
    if (k != d && !a.output_tail.empty()) out.output_tail += "[rank " + std::to_string(k) + "]\n" + a.output_tail;
    if (a.shim) {
      if (!out.shim) out.shim = ShimRecord{};
      out.shim->processes += a.shim->processes;
      out.shim->armed += a.shim->armed;
      out.shim->rejected += a.shim->rejected;
      out.shim->ways_in |= a.shim->ways_in;
      out.shim->driver_called = out.shim->driver_called || a.shim->driver_called;
      out.shim->allocations += a.shim->allocations;
      out.shim->refused_by_rules += a.shim->refused_by_rules;
      out.shim->refused_by_cap += a.shim->refused_by_cap;
      out.shim->tampered += a.shim->tampered;
      out.shim->plan_generation = std::max(out.shim->plan_generation, a.shim->plan_generation);
    }
    if (!a.thinned) {
      for (const Event& e : a.events) {
        if (e.src != events::kSrcProbe || e.kind != events::kStep || !e.has("grads_cleared")) continue;
        ++unthinned_grads.first;
        if (!e.flag("grads_cleared", true)) ++unthinned_grads.second;
      }
    }
    for (Event& e : a.events) {
      if (e.fields.is_object() && !e.fields.contains("rank")) e.fields["rank"] = static_cast<int>(k);
      out.events.push_back(std::move(e));
    }
    out.samples.insert(out.samples.end(), a.samples.begin(), a.samples.end());
    if (a.thinned) {
      // Note [Thinned event logs] in event_log_reader.cpp: counts add up; a fit or a gap of one rank's log is not the
      // merged attempt's, so the checks that need those say they could not judge.
      if (!out.thinned) out.thinned = LogFold{};
      LogFold& f = *out.thinned;
      f.routine += a.thinned->routine;
      f.routine_dropped += a.thinned->routine_dropped;
      f.steps += a.thinned->steps;
      f.steps_dropped += a.thinned->steps_dropped;
      f.grads_asked += a.thinned->grads_asked;
      f.grads_uncleared += a.thinned->grads_uncleared;
      f.windows_missed += a.thinned->windows_missed;
      f.merged = true;
    }
  }
  if (out.thinned) {
    out.thinned->grads_asked += unthinned_grads.first;
    out.thinned->grads_uncleared += unthinned_grads.second;
  }
  std::stable_sort(out.events.begin(), out.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
  std::stable_sort(out.samples.begin(), out.samples.end(), [](const MemorySample& x, const MemorySample& y) { return x.t < y.t; });
  return out;
}

namespace {
// Note [Ranks seen in events]: the probe tags its events with its process's RANK; the shim's events of the
// same pid get that rank, when at least `at_least` ranks were seen. Returns the ranks seen.
std::set<int> tag_ranks_by_pid(Attempt& a, size_t at_least) {
  std::map<int, int> rank_of_pid;
  std::set<int> seen;
  for (const Event& e : a.events)
    if (e.src == events::kSrcProbe)
      if (int r = rank_of(e); r >= 0) {
        rank_of_pid[e.pid] = r;
        seen.insert(r);
      }
  if (seen.size() < at_least) return seen;
  for (Event& e : a.events) {
    if (e.src == events::kSrcRunner || rank_of(e) >= 0 || !e.fields.is_object()) continue;
    if (auto it = rank_of_pid.find(e.pid); it != rank_of_pid.end()) e.fields["rank"] = it->second;
  }
  return seen;
}

// A rank of a node's torchrun ends as its torchrun did: the attempt's index, times, end, log and faults.
void take_node_end(Attempt& own, const Attempt& node) {
  own.index = node.index;
  own.start = node.start;
  own.end = node.end;
  own.end_kind = node.end_kind;
  own.exit_code = node.exit_code;
  own.signal = node.signal;
  own.faults_enabled = node.faults_enabled;
  own.log_path = node.log_path;
}
}  // namespace

Attempt merge_node_torchruns(std::vector<Attempt> nodes, int ranks_per_node) {
  const int per_node = std::max(1, ranks_per_node);
  std::vector<Attempt> ranks(nodes.size() * static_cast<size_t>(per_node));
  std::vector<int> node_of(ranks.size(), -1);
  std::vector<std::string> twice;
  std::vector<Event> shared;
  for (size_t k = 0; k < nodes.size(); ++k) {
    Attempt& node = nodes[k];
    // Pids are the node's own (each node agent's jobs live in a PID namespace of their own): a pid names a
    // rank only within its node's log, so each node's events get their ranks before the nodes meet.
    std::set<int> seen = tag_ranks_by_pid(node, 1);
    const bool assumed = seen.empty();
    if (assumed)  // nothing of its ranks was heard: the ranks --node_rank k gives
      for (int r = 0; r < per_node; ++r) seen.insert(static_cast<int>(k) * per_node + r);
    const int first = *seen.begin();
    // Events of no rank (the torchrun's own, the runner's, values read from the shared output) stay of no
    // rank, as in a local torchrun job's attempt: no rank is credited with a step another printed.
    for (const Event& e : node.events)
      if (rank_of(e) < 0) shared.push_back(e);
    for (int r : seen) {
      if (static_cast<size_t>(r) >= ranks.size()) {  // torchrun started more ranks than the job said
        ranks.resize(static_cast<size_t>(r) + 1);
        node_of.resize(ranks.size(), -1);
      }
      Attempt& own = ranks[static_cast<size_t>(r)];
      if (node_of[static_cast<size_t>(r)] >= 0) {
        twice.push_back("rank " + std::to_string(r) + " on node " + std::to_string(node_of[static_cast<size_t>(r)] + 1) + " and node " +
                        std::to_string(k + 1));
      } else {
        node_of[static_cast<size_t>(r)] = static_cast<int>(k);
        take_node_end(own, node);
        own.oom_message = node.oom_message;
      }
      for (const Event& e : node.events)
        if (rank_of(e) == r) own.events.push_back(e);
      if (r != first) continue;
      // What the node's ranks share (the torchrun's output, its control block's samples and shim record,
      // its log's thinning) is counted once, with its first rank.
      own.output_tail = node.output_tail;
      own.samples = std::move(node.samples);
      own.shim = node.shim;
      own.thinned = node.thinned;
    }
  }
  // A rank no node's events named (it died before the probe started): the node --node_rank gives it.
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (node_of[r] >= 0) continue;
    const Attempt& node = nodes[std::min(nodes.size() - 1, r / static_cast<size_t>(per_node))];
    take_node_end(ranks[r], node);
  }
  Attempt out = merge_ranks(std::move(ranks));
  out.events.insert(out.events.end(), std::make_move_iterator(shared.begin()), std::make_move_iterator(shared.end()));
  std::stable_sort(out.events.begin(), out.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
  if (!twice.empty()) {
    Event w;
    w.t = out.end;
    w.src = events::kSrcRunner;
    w.kind = events::kWarning;
    std::string which;
    for (const std::string& t : twice) which += (which.empty() ? "" : ", ") + t;
    w.fields = {{"message", "the nodes' torchruns made more than one world: their events name " + which +
                                " (each node's torchrun must be given --nnodes, its own --node_rank and the same rendezvous)"}};
    out.events.push_back(std::move(w));
  }
  return out;
}

bool split_ranks_from_events(Attempt& a) {
  if (!a.ranks.empty()) return false;
  std::set<int> seen = tag_ranks_by_pid(a, 2);
  if (seen.size() < 2) return false;
  for (int k = 0; k <= *seen.rbegin(); ++k) {
    // The rank's view: the launcher's end, the rank's own events (its OOM message, if any, is in the
    // shared output, which cannot say whose it was).
    Attempt own;
    own.end_kind = a.end_kind;
    own.exit_code = a.exit_code;
    own.signal = a.signal;
    for (const Event& e : a.events)
      if (rank_of(e) == k) own.events.push_back(e);
    a.ranks.push_back(rank_end(k, a, own));
  }
  return true;
}

int64_t steps_all_ranks_completed(const Attempt& a) {
  if (a.ranks.empty()) return a.last_completed_step();
  int64_t low = a.ranks.front().last_step;
  for (const RankEnd& r : a.ranks) low = std::min(low, r.last_step);
  return low;
}

// A faulthandler dump: blocks that start "Thread 0x... (most recent call first):" or "Current thread 0x...",
// then lines `  File "path", line N in function`, innermost first.
std::string innermost_frame(const std::string& stacks) {
  // The main thread is the one a hang is about: CPython lists threads newest first, so it is the last
  // block (the signal may land on any thread, so "Current thread" need not be it).
  size_t block = stacks.rfind("hread 0x");
  if (block == std::string::npos) block = 0;
  size_t at = stacks.find("File \"", block);
  if (at == std::string::npos) return {};
  size_t path_end = stacks.find('"', at + 6);
  size_t eol = stacks.find('\n', at);
  if (path_end == std::string::npos || (eol != std::string::npos && path_end > eol)) return {};
  std::string path = stacks.substr(at + 6, path_end - at - 6);
  std::string rest = stacks.substr(path_end + 1, (eol == std::string::npos ? stacks.size() : eol) - path_end - 1);
  std::string line, function;
  size_t ln = rest.find("line ");
  size_t in = rest.find(" in ");
  if (ln != std::string::npos) line = rest.substr(ln + 5, (in == std::string::npos ? rest.size() : in) - ln - 5);
  if (in != std::string::npos) function = rest.substr(in + 4);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  size_t slash = path.rfind('/');
  std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  return (function.empty() ? std::string("?") : function) + " (" + file + (line.empty() ? "" : ":" + line) + ")";
}

}  // namespace oomh
