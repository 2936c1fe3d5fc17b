// The table of out-of-memory failures (oom_kinds.h, Note [Which errors are OOMs]).

#include "oomharness/policies/oom_kinds.h"

#include <cctype>

namespace oomh::oom {

namespace {
std::string lowered(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const OomKind* classify_lowered(const std::string& text) {
  for (const OomKind& k : kOomKinds)
    for (std::string_view w : k.words)
      if (!w.empty() && text.find(w) != std::string::npos) return &k;
  return nullptr;
}

// RE2 needs its metacharacters escaped; the words hold ' ', ':', '\'' and '_' only, but escape them all.
std::string escaped(std::string_view w) {
  std::string out;
  for (char c : w) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != ' ' && c != '_') out += '\\';
    out += c;
  }
  return out;
}
}  // namespace

const OomKind* classify(std::string_view message) { return classify_lowered(lowered(message)); }

const OomKind* kind_named(std::string_view name) {
  for (const OomKind& k : kOomKinds)
    if (k.name == name) return &k;
  return nullptr;
}

bool is_oom_message(std::string_view line) {
  const std::string text = lowered(line);
  if (classify_lowered(text)) return true;
  for (std::string_view w : kLooseWords)
    if (text.find(w) != std::string::npos) return true;
  return false;
}

std::string message_pattern() {
  std::string out;
  auto add = [&](std::string_view w) {
    if (w.empty()) return;
    if (!out.empty()) out += '|';
    out += escaped(w);
  };
  for (std::string_view w : kLooseWords) add(w);
  for (const OomKind& k : kOomKinds)
    for (std::string_view w : k.words) add(w);
  return out;
}

}  // namespace oomh::oom
