// Note [A command that starts torchrun] in torchrun_command.h.

#include "suite/torchrun_command.h"

#include <algorithm>
#include <cctype>

namespace oomh::suite {

namespace {

using Words = std::vector<std::string>;

// TEXT's simple commands, each as its words with the quotes taken off; `$(...)` is kept as one piece of a
// word. Rough where a shell is subtle (here-documents, `case`), exact for the commands users write.
std::vector<Words> simple_commands(const std::string& text) {
  std::vector<Words> out;
  Words cur;
  std::string word;
  bool in_word = false;
  auto end_word = [&] {
    if (in_word) cur.push_back(word);
    word.clear();
    in_word = false;
  };
  auto end_command = [&] {
    end_word();
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '\'') {
      in_word = true;
      for (++i; i < n && text[i] != '\''; ++i) word += text[i];
    } else if (c == '"') {
      in_word = true;
      for (++i; i < n && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < n && std::string_view("\"\\$`").find(text[i + 1]) != std::string_view::npos) ++i;
        word += text[i];
      }
    } else if (c == '\\' && i + 1 < n) {
      in_word = true;
      if (text[++i] != '\n') word += text[i];
    } else if (c == '$' && i + 1 < n && text[i + 1] == '(') {
      in_word = true;
      int depth = 0;
      for (; i < n; ++i) {
        word += text[i];
        if (text[i] == '(') ++depth;
        else if (text[i] == ')' && --depth == 0) break;
      }
    } else if (c == '#' && !in_word) {
      while (i + 1 < n && text[i + 1] != '\n') ++i;
    } else if (c == ';' || c == '&' || c == '|' || c == '\n' || c == '(' || c == ')') {
      end_command();
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      end_word();
    } else {
      in_word = true;
      word += c;
    }
  }
  end_command();
  return out;
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_assignment(const std::string& w) {
  size_t eq = w.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  return std::all_of(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(eq),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
         !std::isdigit(static_cast<unsigned char>(w[0]));
}

// python, python3, python3.11: "python" and then digits and dots.
bool is_python(const std::string& name) {
  if (name.rfind("python", 0) != 0) return false;
  return std::all_of(name.begin() + 6, name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
}

// torchrun's options that take no value (after '-' became '_'): every other option takes the next word
// unless it is written --name=value.
bool is_flag(const std::string& name) {
  for (const char* f : {"--standalone", "-m", "--module", "--no_python", "--run_path", "--virtual_local_rank"})
    if (name == f) return true;
  return false;
}

std::optional<TorchrunCommand> read_options(const Words& w, size_t i) {
  TorchrunCommand tr;
  for (; i < w.size(); ++i) {
    const std::string& word = w[i];
    if (word == "--" || word.empty() || word[0] != '-') break;  // the training script
    size_t eq = word.find('=');
    std::string name = word.substr(0, eq);
    for (size_t k = 2; k < name.size(); ++k)
      if (name[k] == '-') name[k] = '_';
    std::string value;
    if (eq != std::string::npos) value = word.substr(eq + 1);
    else if (!is_flag(name) && i + 1 < w.size()) value = w[++i];
    if (name == "--standalone") tr.standalone = true;
    else if (name == "--nnodes") tr.nnodes = value;
    else if (name == "--nproc_per_node") tr.nproc_per_node = value;
  }
  return tr;
}

std::optional<TorchrunCommand> of_simple_command(const Words& w) {
  size_t i = 0;
  while (i < w.size()) {
    if (w[i] == "exec" || is_assignment(w[i])) {
      ++i;
    } else if (base_name(w[i]) == "env") {
      for (++i; i < w.size() && (is_assignment(w[i]) || (!w[i].empty() && w[i][0] == '-')); ++i) {
      }
    } else {
      break;
    }
  }
  if (i >= w.size()) return std::nullopt;
  const std::string program = base_name(w[i]);
  if (program == "torchrun") return read_options(w, i + 1);
  if (!is_python(program)) return std::nullopt;
  for (size_t j = i + 1; j < w.size() && !w[j].empty() && w[j][0] == '-'; ++j) {
    if (w[j] == "-m") return j + 1 < w.size() && w[j + 1] == "torch.distributed.run" ? read_options(w, j + 2) : std::nullopt;
    if (w[j] == "-mtorch.distributed.run") return read_options(w, j + 1);
    if (w[j] == "-c" || w[j].rfind("-m", 0) == 0) return std::nullopt;  // code, or another module
    if (w[j] == "-X" || w[j] == "-W") ++j;                              // options with a value
  }
  return std::nullopt;
}

std::optional<long> small_integer(const std::string& s) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return std::nullopt;
  return std::stol(s);
}

}  // namespace

std::optional<TorchrunCommand> torchrun_command(const std::vector<std::string>& argv) {
  if (argv.size() == 3 && (argv[0] == "/bin/sh" || base_name(argv[0]) == "sh" || base_name(argv[0]) == "bash") && argv[1] == "-c") {
    for (const Words& w : simple_commands(argv[2]))
      if (auto tr = of_simple_command(w)) return tr;
    return std::nullopt;
  }
  return of_simple_command(argv);
}

std::optional<std::string> torchrun_contradiction(const TorchrunCommand& tr, int nodes, int ranks_per_node, bool nnodes_from_env,
                                                  bool nproc_from_env) {
  const std::string job = "the job has nodes: " + std::to_string(nodes) + " and ranks_per_node: " + std::to_string(ranks_per_node);
  if (tr.standalone && nodes > 1)
    return "torchrun --standalone is one node, and " + job +
           ": give torchrun --nnodes, --node_rank and a rendezvous on MASTER_ADDR:MASTER_PORT instead (docs/slurm.md)";
  if (!tr.nnodes && !nnodes_from_env && nodes > 1)
    return "torchrun is not given --nnodes (it then takes 1: each node's ranks would be a world of their own), and " + job;
  if (tr.nnodes) {
    const std::string& v = *tr.nnodes;
    size_t colon = v.find(':');
    auto lo = small_integer(v.substr(0, colon));
    auto hi = colon == std::string::npos ? lo : small_integer(v.substr(colon + 1));
    if (lo && hi && (nodes < *lo || nodes > *hi))
      return "torchrun --nnodes " + v + ", and " + job + ": each node runs one torchrun, so --nnodes must allow " + std::to_string(nodes);
  }
  if (!tr.nproc_per_node && !nproc_from_env && ranks_per_node != 1)
    return "torchrun is not given --nproc_per_node (it then starts 1 rank per node), and " + job;
  if (tr.nproc_per_node)
    if (auto m = small_integer(*tr.nproc_per_node); m && *m != ranks_per_node)
      return "torchrun --nproc_per_node " + *tr.nproc_per_node + ", and " + job + ": each node's torchrun would start " +
             *tr.nproc_per_node + " ranks, not " + std::to_string(ranks_per_node);
  return std::nullopt;
}

}  // namespace oomh::suite
