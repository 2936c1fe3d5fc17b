#include "suite/names.h"

#include <algorithm>
#include <cctype>

namespace oomh::suite {


std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates) {
  // A typo is a few edits, fewer for short names: 'cwd' vs 'env' (3 edits) is not a typo.
  const size_t allowed = std::max<size_t>(1, std::min<size_t>(3, (name.size() + 1) / 3));
  std::string best;
  size_t best_distance = allowed + 1;
  for (const auto& c : candidates) {
    const size_t dist = edit_distance(name, c);
    if (dist < best_distance) {
      best = c;
      best_distance = dist;
    }
  }
  // A name that contains the candidate, or the other way round ('batch_halving_x', 'halving'), is also
  // a likely slip when nothing is closer.
  if (best.empty()) {
    for (const auto& c : candidates) {
      if (c.size() >= 3 && name.size() >= 3 &&
          (name.find(c) != std::string_view::npos || c.find(name) != std::string::npos)) {
        best = c;
        break;
      }
    }
  }
  return best;
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
