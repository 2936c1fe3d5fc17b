// Note [The user's traceback] in oomharness/reports/tracebacks.h.

#include "oomharness/reports/tracebacks.h"

#include <array>
#include <utility>
#include <vector>

namespace oomh {

namespace {

// The package's modules and subpackages (python/oomharness/: a name ending in '/' is a folder, every file in
// it) and the part of the harness each belongs to. The modules every in-job part shares (the job context,
// the hook bus, the patch table, events, the control block) are the probe's to a user.
constexpr std::array<std::pair<std::string_view, std::string_view>, 17> kModules{{
    {"virtual_device/", "virtual device"},
    {"probe/", "probe"},
    {"_boot.py", "probe"},
    {"_breakdown.py", "probe"},
    {"_control.py", "probe"},
    {"_events.py", "probe"},
    {"_job.py", "probe"},
    {"_hooks.py", "probe"},
    {"_patches.py", "probe"},
    {"_abi.py", "probe"},
    {"oom_kinds.py", "probe"},
    {"recover.py", "recovery helpers"},
    {"harness.py", "harness"},
    {"pytest_plugin.py", "pytest plugin"},
    {"__init__.py", "package"},
    {"__main__.py", "package"},
    {"_native/", "package"},
}};

size_t indent_of(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i;
}

// The path of a `  File "PATH", line N, in NAME` line; empty when the line is not one.
std::string_view frame_path(std::string_view line) {
  std::string_view rest = line.substr(indent_of(line));
  if (rest.rfind("File \"", 0) != 0) return {};
  rest.remove_prefix(6);
  size_t end = rest.find("\", line ");
  return end == std::string_view::npos ? std::string_view() : rest.substr(0, end);
}

// The harness's part a frame's file belongs to, or empty for a file of someone else's.
std::string_view harness_part(std::string_view path) {
  for (const auto& [name, part] : kModules) {
    const std::string tail = "oomharness/" + std::string(name);
    if (name.back() == '/') {
      // A folder: "oomharness/probe/" at the start of the path or after a '/', a file name after it.
      for (size_t at = path.find(tail); at != std::string_view::npos; at = path.find(tail, at + 1)) {
        const std::string_view rest = path.substr(at + tail.size());
        if ((at == 0 || path[at - 1] == '/') && !rest.empty() && rest.find('/') == std::string_view::npos)
          return part;
      }
      continue;
    }
    if (path.size() >= tail.size() && path.substr(path.size() - tail.size()) == tail &&
        (path.size() == tail.size() || path[path.size() - tail.size() - 1] == '/'))
      return part;
  }
  return {};
}

}  // namespace

std::string fold_harness_frames(std::string_view output) {
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < output.size();) {
    size_t end = output.find('\n', at);
    if (end == std::string_view::npos) end = output.size();
    else ++end;  // each line keeps its newline
    lines.push_back(output.substr(at, end - at));
    at = end;
  }
  std::string out;
  out.reserve(output.size());
  bool folded_any = false;
  for (size_t i = 0; i < lines.size();) {
    std::string_view path = frame_path(lines[i]);
    if (path.empty() || harness_part(path).empty()) {
      out.append(lines[i]);
      ++i;
      continue;
    }
    // A run of our frames: each is its File line and the lines indented deeper under it.
    const size_t indent = indent_of(lines[i]);
    size_t frames = 0;
    std::vector<std::string_view> parts;
    while (i < lines.size()) {
      std::string_view p = frame_path(lines[i]);
      std::string_view part = p.empty() ? std::string_view() : harness_part(p);
      if (part.empty() || indent_of(lines[i]) != indent) break;
      ++frames;
      bool seen = false;
      for (auto q : parts) seen = seen || q == part;
      if (!seen) parts.push_back(part);
      ++i;
      while (i < lines.size() && frame_path(lines[i]).empty() && indent_of(lines[i]) > indent &&
             lines[i].find_first_not_of(" \n") != std::string_view::npos)
        ++i;
    }
    folded_any = true;
    std::string where;
    if (parts.size() == 1) {
      where = "oomharness's " + std::string(parts.front());
    } else {
      where = "oomharness (";
      for (size_t k = 0; k < parts.size(); ++k) where += (k ? ", " : "") + std::string(parts[k]);
      where += ")";
    }
    out.append(indent, ' ');
    out += "\u2026 " + std::to_string(frames) + (frames == 1 ? " frame" : " frames") + " in " + where +
           " (folded; the attempt's log has them)\n";
  }
  if (!folded_any) return std::string(output);
  return out;
}

}  // namespace oomh
