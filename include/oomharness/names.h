#pragma once
// "Did you mean ...?": the distance between a name a user wrote and the names we know, shared by the shim
// (OOMH_ variables), the suite loader (keys), the policy registry (arguments) and the command line.
// Header-only because the shim includes it; it allocates, so the shim calls it at start-up only, never in
// a hook.

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace oomh {

// Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`, ignoring case: 'Tiemout' is
// one edit from 'timeout'.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

// Note [One typo threshold]
// A "did you mean" asks this one function (suite keys/values, rule phases, --fault/--expect keys, commands
// and flags, policy arguments, the shim's OOMH_ variables). A typo is a
// few edits, fewer for short names ('cwd'/'env', 3 edits, is not one): max(1, min(3, (length + 1) / 3)). When nothing is that close, a name that
// contains a candidate or is contained in one ('batch_halving_x', 'halving') is taken as the slip.
// Returns "" when nothing is near.
inline size_t typo_edits_allowed(std::string_view name) {
  return std::max<size_t>(1, std::min<size_t>(3, (name.size() + 1) / 3));
}

template <class Names>
std::string nearest_name(std::string_view name, const Names& candidates) {
  const size_t allowed = typo_edits_allowed(name);
  std::string best;
  size_t best_distance = allowed + 1;
  for (const auto& c : candidates) {
    const std::string_view cv(c);
    const size_t dist = edit_distance(name, cv);
    if (dist < best_distance) {
      best = std::string(cv);
      best_distance = dist;
    }
  }
  if (best.empty()) {
    for (const auto& c : candidates) {
      const std::string_view cv(c);
      if (cv.size() >= 3 && name.size() >= 3 && (name.find(cv) != std::string_view::npos || cv.find(name) != std::string_view::npos)) {
        best = std::string(cv);
        break;
      }
    }
  }
  return best;
}

}  // namespace oomh
