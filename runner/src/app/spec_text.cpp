// Text helpers for the command-line spec parsers.

#include "oomharness/names.h"
#include "app/spec_text.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace oomh::app {

using suite::trim;

std::pair<std::string, std::optional<std::string>> split_key_value(std::string_view item) {
  size_t eq = item.find('=');
  if (eq == std::string_view::npos) return {std::string(trim(item)), std::nullopt};
  return {std::string(trim(item.substr(0, eq))), std::string(trim(item.substr(eq + 1)))};
}

std::optional<double> parse_number(std::string_view text) {
  std::string s(trim(text));
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::optional<bool> parse_boolean(std::string_view text) {
  std::string s = to_lower(std::string(trim(text)));
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  return std::nullopt;
}

std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& known) {
  std::string near = nearest_name(word, known);  // Note [One typo threshold] in include/oomharness/names.h
  if (near.empty()) return std::nullopt;
  return near;
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace oomh::app
