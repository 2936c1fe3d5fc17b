#include "suite/shell_words.h"

namespace oomh::suite {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Characters that mean something to a shell when they are not quoted.
bool is_shell_syntax(char c) {
  switch (c) {
    case '|': case '&': case ';': case '<': case '>': case '(': case ')': case '$': case '`': case '*':
      return true;
    default:
      return false;
  }
}

std::string needs_shell(std::string_view what) {
  return "uses shell syntax (" + std::string(what) +
         "), which only a shell understands: set 'shell: true', or quote it";
}

}  // namespace

Expected<std::vector<std::string>> split_shell_words(std::string_view text) {
  using Result = Expected<std::vector<std::string>>;
  auto refused = [](std::string why) { return Result::failure(Error::of(std::move(why))); };
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word has started (possibly empty: '' is an empty argument)
  size_t i = 0;
  auto finish = [&] {
    if (in_word) words.push_back(word);
    word.clear();
    in_word = false;
  };
  while (i < text.size()) {
    const char c = text[i];
    if (is_space(c)) {
      finish();
      ++i;
    } else if (c == '\'') {
      const size_t close = text.find('\'', i + 1);
      if (close == std::string_view::npos) return refused("unterminated single quote");
      word.append(text.substr(i + 1, close - i - 1));
      in_word = true;
      i = close + 1;
    } else if (c == '"') {
      in_word = true;
      ++i;
      bool closed = false;
      while (i < text.size()) {
        const char d = text[i];
        if (d == '"') { closed = true; ++i; break; }
        if (d == '\\' && i + 1 < text.size()) {
          const char e = text[i + 1];
          if (e == '"' || e == '\\' || e == '$' || e == '`') { word += e; i += 2; continue; }
          if (e == '\n') { i += 2; continue; }
          word += d;
          ++i;
          continue;
        }
        if (d == '$' || d == '`') return refused(needs_shell(std::string("'") + d + "' inside double quotes"));
        word += d;
        ++i;
      }
      if (!closed) return refused("unterminated double quote");
    } else if (c == '\\') {
      if (i + 1 >= text.size()) return refused("ends with a backslash that escapes nothing");
      if (text[i + 1] != '\n') {
        word += text[i + 1];
        in_word = true;
      }
      i += 2;
    } else if (is_shell_syntax(c)) {
      return refused(needs_shell(std::string("'") + c + "'"));
    } else if (c == '#' && !in_word) {
      return refused(needs_shell("'#' comment"));
    } else {
      word += c;
      in_word = true;
      ++i;
    }
  }
  finish();
  return Result::success(std::move(words));
}

}  // namespace oomh::suite
