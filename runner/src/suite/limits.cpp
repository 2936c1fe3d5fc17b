// Suite limits (Note [Suite limits] in limits.h).

#include "suite/limits.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

namespace oomh::suite {

namespace {

SuiteError file_error(const std::string& path, const std::string& message) {
  return SuiteError{SourceLocation{path, 0, 0}, message};
}

// One UTF-8 sequence at s[i]: its code point and length, or length 0 when it is not valid UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t decode(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t n;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

bool is_control(uint32_t cp) { return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F); }

std::string code_point(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

// Thrown from the event handler to stop yaml-cpp at once, where the limit was crossed.
struct LimitCrossed {
  YAML::Mark mark;
  std::string message;
};

// Counts what the document would become, building nothing (Note [Suite limits]).
class Measure : public YAML::EventHandler {
 public:
  int documents = 0;
  YAML::Mark last_start, previous_start;
  std::optional<YAML::Mark> second_value;  // the second document's first value, where its error points

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents;
    previous_start = last_start;
    last_start = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = sizes_.find(anchor);
    const uint64_t size = it == sizes_.end() ? 1 : it->second;
    aliased_ = true;
    add(mark, size);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    leaf(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  void add(const YAML::Mark& mark, uint64_t n) {
    if (documents == 2 && !second_value) second_value = mark;
    values_ = values_ + n < values_ ? UINT64_MAX : values_ + n;
    if (values_ <= kMaxValues) return;
    if (aliased_)
      throw LimitCrossed{mark, "the document's aliases (*name) expand it to more than " + std::to_string(kMaxValues) +
                                   " values (an alias bomb?); write the values out, or alias less"};
    throw LimitCrossed{mark, "the document holds more than " + std::to_string(kMaxValues) + " values"};
  }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    add(mark, 1);
    if (anchor) sizes_[anchor] = 1;
  }
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (static_cast<int>(open_.size()) >= kMaxDepth)
      throw LimitCrossed{mark, "the document nests deeper than " + std::to_string(kMaxDepth) +
                                   " levels of lists and maps; a suite needs a handful"};
    add(mark, 1);
    open_.push_back(Open{anchor, values_ - 1});
  }
  void close() {
    if (open_.empty()) return;
    const Open o = open_.back();
    open_.pop_back();
    if (o.anchor) sizes_[o.anchor] = values_ - o.values_before;
  }

  struct Open {
    YAML::anchor_t anchor;
    uint64_t values_before;
  };
  std::vector<Open> open_;
  std::unordered_map<YAML::anchor_t, uint64_t> sizes_;  // values an anchored node stands for, expanded
  uint64_t values_ = 0;
  bool aliased_ = false;
};

SourceLocation location(const std::string& file, const YAML::Mark& mark) {
  if (mark.line < 0 || mark.column < 0) return SourceLocation{file, 1, 1};
  return SourceLocation{file, mark.line + 1, mark.column + 1};
}

// The text of 0-based line `n`.
std::string_view line_of(const std::string& text, int n) {
  size_t start = 0;
  for (int i = 0; i < n; ++i) {
    start = text.find('\n', start);
    if (start == std::string::npos) return {};
    ++start;
  }
  size_t end = text.find('\n', start);
  return std::string_view(text).substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace

bool is_valid_utf8(std::string_view s, size_t* bad_at) {
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t n = decode(s, i, cp);
    if (!n) {
      if (bad_at) *bad_at = i;
      return false;
    }
    i += n;
  }
  return true;
}

std::string printable(std::string_view s, size_t max) {
  std::string out;
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    const size_t n = decode(s, i, cp);
    if (!n || is_control(cp)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(s[i]));
      out += buf;
      i += n ? n : 1;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

std::optional<std::string> name_problem(std::string_view name) {
  if (name.size() > kMaxNameBytes)
    return "is " + std::to_string(name.size()) + " bytes long; a name has at most " + std::to_string(kMaxNameBytes);
  uint32_t cp;
  for (size_t i = 0; i < name.size();) {
    const size_t n = decode(name, i, cp);
    if (!n) return "is not valid UTF-8 (byte " + std::to_string(i + 1) + ")";
    if (is_control(cp)) return "contains a control character (" + code_point(cp) + "); names are printed and used as file names";
    i += n;
  }
  return std::nullopt;
}

// Note [One job, one folder] in limits.h.
std::string folder_key(std::string_view name) {
  std::string key;
  for (size_t i = 0; i < name.size();) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x80) {
      key += std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '=' ? static_cast<char>(c) : '_';
      ++i;
      continue;
    }
    uint32_t cp;
    const size_t n = decode(name, i, cp);
    if (!n || is_control(cp)) {  // not UTF-8, or a control character: no part of a file name
      key += '_';
      ++i;
      continue;
    }
    if (key.size() + n > kMaxFolderKeyBytes) break;
    key.append(name.substr(i, n));
    i += n;
  }
  if (key.size() > kMaxFolderKeyBytes) key.resize(kMaxFolderKeyBytes);
  if (key.empty() || key == "." || key == "..") key = "job";
  return key;
}

std::string folder_name(std::string_view name) {
  std::string key = folder_key(name);
  if (key == name) return key;
  // The runner's "suite::job" keeps its readable "suite__job" when the "__" can only be that "::": one "::",
  // no "__" of its own, and nothing else changed.
  const size_t sep = name.find("::");
  if (sep != std::string_view::npos && name.find("::", sep + 2) == std::string_view::npos &&
      name.find("__") == std::string_view::npos && key.size() == name.size() &&
      key == std::string(name.substr(0, sep)) + "__" + std::string(name.substr(sep + 2)))
    return key;
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "-%08x", static_cast<unsigned>((h ^ (h >> 32)) & 0xffffffffu));
  return key + hex;
}

FileText read_suite_file(const std::string& path) {
  FileText out;
  auto fail = [&](const std::string& message) {
    out.error = file_error(path, message);
    return out;
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any non-file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(std::string("cannot read suite: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return fail(std::string("cannot read suite: ") + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return fail(std::string("cannot read suite: ") + std::strerror(EISDIR));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("cannot read suite: not a regular file (a device, FIFO or socket); a suite is a YAML file");
  }
  const auto too_big = [&](uint64_t bytes) {
    return "cannot read suite: the file is " + std::to_string(bytes) + " bytes; a suite is at most " +
           std::to_string(kMaxDocumentBytes >> 20) + " MiB";
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxDocumentBytes) {
    ::close(fd);
    return fail(too_big(static_cast<uint64_t>(st.st_size)));
  }
  std::string text;
  text.resize(static_cast<size_t>(st.st_size) + 1);
  size_t got = 0;
  // Read one byte past the limit at most: a file that grows while it is read is still bounded.
  for (;;) {
    if (got == text.size()) {
      if (text.size() > kMaxDocumentBytes) break;
      text.resize(std::min(text.size() * 2 + 4096, kMaxDocumentBytes + 1));
    }
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return fail(std::string("cannot read suite: ") + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > kMaxDocumentBytes) return fail(too_big(got));
  text.resize(got);
  out.text = std::move(text);
  return out;
}

std::optional<SuiteError> check_document(const std::string& text, const std::string& file) {
  if (text.size() > kMaxDocumentBytes)
    return file_error(file, "the suite is " + std::to_string(text.size()) + " bytes; a suite is at most " +
                                std::to_string(kMaxDocumentBytes >> 20) + " MiB");
  // Encoding and control characters, with the place of the first bad byte.
  int line = 1, column = 1;
  uint32_t cp;
  for (size_t i = 0; i < text.size();) {
    const size_t n = decode(text, i, cp);
    if (!n)
      return SuiteError{SourceLocation{file, line, column}, "the suite is not valid UTF-8 here (byte " +
                                                                std::to_string(i + 1) + "); YAML files are UTF-8"};
    if (is_control(cp) && cp != '\t' && cp != '\n' && cp != '\r' && cp != 0x85)
      return SuiteError{SourceLocation{file, line, column},
                        "control character " + code_point(cp) + " in the suite; YAML allows only tab, newline and "
                        "carriage return (write it as an escape in a double-quoted string)"};
    if (cp == '\n') {
      ++line;
      column = 1;
    } else {
      column += static_cast<int>(n);
    }
    i += n;
  }

  std::istringstream in(text);
  Measure measure;
  try {
    YAML::Parser parser(in);
    // At most three documents: one to read, a second to refuse, a third to tell a real second document
    // from a parser stuck on a token (Note [Suite limits]).
    for (int i = 0; i < 3 && parser.HandleNextDocument(measure); ++i) {
      if (measure.documents >= 2 && measure.last_start.pos == measure.previous_start.pos) {
        const YAML::Mark& m = measure.last_start;
        const char c = m.pos >= 0 && static_cast<size_t>(m.pos) < text.size() ? text[static_cast<size_t>(m.pos)] : '?';
        std::string what = "'" + printable(std::string_view(&c, 1)) + "'";
        std::string message = "YAML syntax error: unexpected " + what + " where a value was expected";
        if (c == ',') message += " (a ',' separates items only inside [ ] or { })";
        return SuiteError{location(file, m), message};
      }
    }
  } catch (const LimitCrossed& e) {
    return SuiteError{location(file, e.mark), e.message};
  } catch (const YAML::Exception& e) {
    SourceLocation where = location(file, e.mark);
    const std::string message = explain_syntax_error(text, e.mark.line, "YAML syntax error: " + e.msg, where);
    return SuiteError{where, message};
  }
  if (measure.documents >= 2)
    return SuiteError{location(file, measure.second_value ? *measure.second_value : measure.last_start),
                      "a suite file holds one YAML document; this is a second one ('---')"};
  return std::nullopt;
}

std::string explain_syntax_error(const std::string& text, int line, const std::string& message, SourceLocation& where) {
  if (line < 0) return message;
  for (int n = line; n >= 0 && n >= line - 1; --n) {
    const std::string_view l = line_of(text, n);
    const size_t indent_end = l.find_first_not_of(" \t");
    const std::string_view indent = l.substr(0, indent_end == std::string_view::npos ? l.size() : indent_end);
    const size_t tab = indent.find('\t');
    if (tab == std::string_view::npos) continue;
    where.line = n + 1;
    where.column = static_cast<int>(tab) + 1;
    return "tabs are not allowed for indentation in YAML; indent with spaces";
  }
  return message;
}

}  // namespace oomh::suite
