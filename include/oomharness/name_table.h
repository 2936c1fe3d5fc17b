#pragma once
// Note [Name tables]
// A closed set of names that a user writes, or that crosses a process or a file, is declared once, as a
// constexpr table of {value, name, help}: the training phases and the event kinds (the ABI: control_block.h,
// events.h), the restart reasons, devices, backends and exit codes of the runner
// (runner/include/oomharness/runner/name_tables.h), and the attempt outcomes of results.json
// (reports/include/oomharness/reports/result.h). Parsers (value_named), printers (name_of), the list an
// error message offers (names_text) and "did you mean" (suggest_name, Note [One typo threshold] in
// names.h) read the table, so that a name added to it is known everywhere at once. The copies that
// cannot include a C++ header (the Python package, the man page, the bash completion, docs/*.md) are
// checked against the tables by tests/runner/model/name_tables_test.cpp, which says which copy lacks a
// name. Header-only and constexpr because the shim includes it; names_of, names_text and suggest_name
// allocate, so the shim calls them at start-up only, never in a hook.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oomharness/names.h"

namespace oomh {

template <class T>
struct NameEntry {
  T value;
  std::string_view name;
  std::string_view help;
};

template <class T, size_t N>
using NameTable = std::array<NameEntry<T>, N>;

// The value named `name` (exactly), or nullopt.
template <class T, size_t N>
constexpr std::optional<T> value_named(const NameTable<T, N>& table, std::string_view name) {
  for (const NameEntry<T>& e : table)
    if (e.name == name) return e.value;
  return std::nullopt;
}

// The name of `value`, or `fallback` when the table has none.
template <class T, size_t N>
constexpr std::string_view name_of(const NameTable<T, N>& table, T value, std::string_view fallback = {}) {
  for (const NameEntry<T>& e : table)
    if (e.value == value) return e.name;
  return fallback;
}

template <class T, size_t N>
constexpr const NameEntry<T>* entry_named(const NameTable<T, N>& table, std::string_view name) {
  for (const NameEntry<T>& e : table)
    if (e.name == name) return &e;
  return nullptr;
}

template <class T, size_t N>
std::vector<std::string> names_of(const NameTable<T, N>& table) {
  std::vector<std::string> out;
  out.reserve(N);
  for (const NameEntry<T>& e : table) out.emplace_back(e.name);
  return out;
}

// "oom, nonzero, signal, any"; with last = " or ": "local or slurm".
template <class T, size_t N>
std::string names_text(const NameTable<T, N>& table, std::string_view sep = ", ", std::string_view last = {}) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += (i + 1 == N && !last.empty()) ? last : sep;
    out += table[i].name;
  }
  return out;
}

// The table's name nearest to `name` by Note [One typo threshold]; "" when none is near.
template <class T, size_t N>
std::string suggest_name(const NameTable<T, N>& table, std::string_view name) {
  return nearest_name(name, names_of(table));
}

}  // namespace oomh
