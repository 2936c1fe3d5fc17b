#include "suite/templates.h"

#include <cctype>

#include "oomharness/runner/suite.h"

namespace oomh::suite {

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// One step of the template scanner: what starts at `i`.
struct Piece {
  enum Kind { text, open_escape, close_escape, variable, bad } kind = text;
  size_t length = 1;
  std::string name;   // variable
  std::string error;  // bad
};

Piece piece_at(std::string_view s, size_t i) {
  const char c = s[i];
  if (c == '{') {
    if (i + 1 < s.size() && s[i + 1] == '{') return {Piece::open_escape, 2, {}, {}};
    const size_t close = s.find('}', i + 1);
    if (close == std::string_view::npos)
      return {Piece::bad, 1, {}, "'{' is never closed in '" + std::string(s.substr(i, 24)) + "' (write '{{' for a literal brace)"};
    const std::string_view inner = s.substr(i + 1, close - i - 1);
    bool valid = !inner.empty() && is_name_start(inner[0]);
    for (char ch : inner) valid = valid && is_name_char(ch);
    if (!valid)
      return {Piece::bad, 1, {}, "'{" + std::string(inner) + "}' is not a variable (write '{{' and '}}' for literal braces)"};
    return {Piece::variable, close - i + 1, std::string(inner), {}};
  }
  if (c == '}') {
    if (i + 1 < s.size() && s[i + 1] == '}') return {Piece::close_escape, 2, {}, {}};
    {
      const size_t from = i >= 23 ? i - 23 : 0;
      return {Piece::bad, 1, {}, "'}' closes nothing in '" + std::string(s.substr(from, i + 1 - from)) + "' (write '}}' for a literal brace)"};
    }
  }
  return {};
}

std::string escape_braces(const std::string& value) {
  std::string out;
  for (char c : value) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

}  // namespace

Expected<std::vector<std::string>> scan_template(std::string_view text) {
  std::vector<std::string> variables;
  for (size_t i = 0; i < text.size();) {
    Piece p = piece_at(text, i);
    if (p.kind == Piece::bad) return Expected<std::vector<std::string>>::failure(Error::of(p.error));
    if (p.kind == Piece::variable) variables.push_back(p.name);
    i += p.length;
  }
  return Expected<std::vector<std::string>>::success(std::move(variables));
}

std::string expand_template(std::string_view text, const std::map<std::string, std::string>& values, bool runtime) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    Piece p = piece_at(text, i);
    const std::string_view raw = text.substr(i, p.length);
    switch (p.kind) {
      case Piece::open_escape: out += runtime ? "{{" : "{"; break;
      case Piece::close_escape: out += runtime ? "}}" : "}"; break;
      case Piece::variable: {
        auto it = values.find(p.name);
        if (it == values.end() || (runtime && is_runtime_variable(p.name))) out += raw;
        else out += runtime ? escape_braces(it->second) : it->second;
        break;
      }
      case Piece::text:
      case Piece::bad: out += raw; break;
    }
    i += p.length;
  }
  return out;
}

}  // namespace oomh::suite

namespace oomh {

// Runtime templates keep `{{`, `}}`, `{workdir}` and `{attempt}` (Note [Suite templates]); anything else
// in braces cannot be left after loading, and is kept as written rather than guessed at.
std::string substitute_runtime(const std::string& s, const std::string& workdir, int attempt) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "{{") == 0) { out += '{'; i += 2; continue; }
    if (s.compare(i, 2, "}}") == 0) { out += '}'; i += 2; continue; }
    if (s.compare(i, 9, "{workdir}") == 0) { out += workdir; i += 9; continue; }
    if (s.compare(i, 9, "{attempt}") == 0) { out += std::to_string(attempt); i += 9; continue; }
    out += s[i++];
  }
  return out;
}

JobSpec resolve_runtime(const JobSpec& job, const std::string& workdir, int attempt) {
  JobSpec out = job;
  for (auto& a : out.argv) a = substitute_runtime(a, workdir, attempt);
  for (auto& [key, value] : out.env) value = substitute_runtime(value, workdir, attempt);
  if (out.cwd) out.cwd = substitute_runtime(*out.cwd, workdir, attempt);
  return out;
}

}  // namespace oomh
