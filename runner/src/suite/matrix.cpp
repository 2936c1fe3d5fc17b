#include "suite/matrix.h"

#include <algorithm>

namespace oomh::suite {

std::vector<std::string> Matrix::variables() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  for (const auto& [name, values] : axes) add(name);
  for (const auto& c : include)
    for (const auto& [name, value] : c) add(name);
  return out;
}

namespace {

// A combination remembers which values came from the lists (never overwritten by an include).
struct Entry {
  Combination original;
  Combination added;
};

bool matches(const Combination& combination, const Combination& partial) {
  for (const auto& [key, value] : partial) {
    auto it = combination.find(key);
    if (it == combination.end() || it->second != value) return false;
  }
  return true;
}

std::vector<Combination> product(const Matrix& m) {
  std::vector<Combination> out{Combination{}};
  for (const auto& [name, values] : m.axes) {
    std::vector<Combination> next;
    for (const auto& partial : out) {
      for (const auto& value : values) {
        Combination c = partial;
        c[name] = value;
        next.push_back(std::move(c));
      }
    }
    out = std::move(next);
  }
  return out;
}

}  // namespace

std::vector<Combination> expand(const Matrix& m) {
  std::vector<Entry> entries;
  if (!m.axes.empty()) {
    for (auto& c : product(m)) {
      const bool excluded = std::any_of(m.exclude.begin(), m.exclude.end(),
                                        [&](const Combination& ex) { return matches(c, ex); });
      if (!excluded) entries.push_back(Entry{std::move(c), {}});
    }
  }
  const size_t from_lists = entries.size();
  for (const auto& inc : m.include) {
    bool extended = false;
    for (size_t i = 0; i < from_lists; ++i) {
      Entry& e = entries[i];
      bool contradicts = false;
      for (const auto& [key, value] : inc) {
        auto it = e.original.find(key);
        if (it != e.original.end() && it->second != value) contradicts = true;
      }
      if (contradicts) continue;
      for (const auto& [key, value] : inc)
        if (!e.original.count(key)) e.added[key] = value;
      extended = true;
    }
    if (!extended) entries.push_back(Entry{inc, {}});
  }
  std::vector<Combination> out;
  for (auto& e : entries) {
    Combination c = e.original;
    for (auto& [key, value] : e.added) c[key] = value;
    out.push_back(std::move(c));
  }
  if (m.axes.empty() && m.include.empty()) out.push_back(Combination{});
  return out;
}

std::vector<Combination> project(const std::vector<Combination>& combinations, const std::set<std::string>& used) {
  std::vector<Combination> out;
  std::set<Combination> seen;  // a linear search per combination made 10,000 jobs cost 10^8 comparisons
  for (const auto& c : combinations) {
    Combination p;
    for (const auto& name : used) {
      auto it = c.find(name);
      p[name] = it == c.end() ? std::string() : it->second;
    }
    if (seen.insert(p).second) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace oomh::suite
