#include "suite/names.h"

#include <algorithm>
#include <cctype>

namespace oomh::suite {


std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates) {
  return oomh::nearest_name(name, candidates);  // Note [One typo threshold] in include/oomharness/names.h
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::string suggestion(std::string_view name, const std::vector<std::string>& candidates, std::string_view known_label) {
  const std::string near = nearest_name(name, candidates);
  if (!near.empty()) return " (did you mean '" + near + "'?)";
  return " (" + std::string(known_label) + ": " + join(candidates) + ")";
}

}  // namespace oomh::suite
