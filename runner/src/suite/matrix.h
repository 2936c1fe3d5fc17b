#pragma once
// Note [Matrix expansion]
// A suite's `matrix:` works like a GitHub Actions matrix: the cartesian product of its lists (the first
// list varies slowest), then `exclude` removes every combination that matches one of its partial maps,
// then each `include` map either extends every combination it does not contradict (it may add new
// variables, and overwrite values that an earlier include added, but never a value of the original lists)
// or, when it extends none, is added as a combination of its own.
//
// A job is expanded once per combination *of the variables it uses*: a job that names only `{alloc}` in a
// matrix of alloc x size runs once per alloc value, and a job that names no matrix variable runs once.
// A variable that a combination lacks (one added by an include that matched only some) expands to "".

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace oomh::suite {

using Combination = std::map<std::string, std::string>;

struct Matrix {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;  // in file order
  std::vector<Combination> include;
  std::vector<Combination> exclude;

  // Every variable any combination can have.
  std::vector<std::string> variables() const;
};

// All combinations, deterministically ordered. A matrix with nothing in it has one empty combination.
std::vector<Combination> expand(const Matrix& matrix);

// The combinations restricted to `used` variables, duplicates removed, first occurrence order kept.
std::vector<Combination> project(const std::vector<Combination>& combinations, const std::set<std::string>& used);

}  // namespace oomh::suite
