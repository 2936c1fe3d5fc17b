#pragma once
// The suite corpora's files (malformed/ and tests/hostile/suites/): NAME.yaml, and NAME.expected whose
// first line is the error the suite must be refused with. Shared by malformed_test.cpp and hostile_test.cpp.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace oomh::test {

// The NAMEs of dir's NAME.yaml files, sorted.
inline std::vector<std::string> corpus_names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string read_first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace oomh::test
