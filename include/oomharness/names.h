#pragma once
// "Did you mean ...?": the distance between a name a user wrote and the names we know, shared by the shim
// (OOMH_ variables), the suite loader (keys), the policy registry (arguments) and the command line.
// Header-only because the shim includes it; it allocates, so the shim calls it at start-up only, never in
// a hook.

#include <algorithm>
#include <cctype>
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

}  // namespace oomh
