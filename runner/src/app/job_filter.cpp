// `-k EXPR`: which jobs of the loaded suites run, chosen the way pytest's `-k` chooses tests.
//
// The expression is words joined by `and`, `or`, `not` and parentheses (pytest's grammar). A word
// matches a job when the job's full name `suite::job` contains it, ignoring case (pytest's rule), or,
// when the word has a glob character (`*`, `?`, `[`), when the full name or the job's own name matches
// it as a glob: `-k 'halv*'` and `-k 'demo::*'` both do what they look like.
//
// The expression is the user's input, so it is bounded (kMaxDepth levels of parentheses and `not`,
// kMaxTokens words and operators: 30,000 nested parentheses overflowed the parser's stack), and globs are
// translated to RE2 (linear time) rather than given to fnmatch, which backtracks on many stars.

#include <cctype>
#include <string>

#include <re2/re2.h>

#include "app/spec_text.h"
#include "oomharness/runner/cli_specs.h"

namespace oomh {

struct JobFilter::Node {
  enum class Kind { word, and_, or_, not_ } kind = Kind::word;
  std::string word;  // lower-cased, for Kind::word
  std::shared_ptr<const Node> left, right;
  std::shared_ptr<const re2::RE2> glob;  // for a word with a glob character

  bool eval(const std::string& full_lower, const std::string& full, const std::string& job) const {
    switch (kind) {
      case Kind::and_: return left->eval(full_lower, full, job) && right->eval(full_lower, full, job);
      case Kind::or_: return left->eval(full_lower, full, job) || right->eval(full_lower, full, job);
      case Kind::not_: return !left->eval(full_lower, full, job);
      case Kind::word: break;
    }
    if (glob) return RE2::FullMatch(full, *glob) || RE2::FullMatch(job, *glob);
    return full_lower.find(word) != std::string::npos;
  }
};

namespace {

using NodePtr = std::shared_ptr<const JobFilter::Node>;

constexpr int kMaxDepth = 100;
constexpr size_t kMaxTokens = 10'000;

bool is_ascii_punct(char c) { return static_cast<unsigned char>(c) < 0x80 && std::ispunct(static_cast<unsigned char>(c)); }

// An fnmatch glob (no flags but case folding: `*` and `?` match '/' too, `\` escapes, `[!...]` negates)
// as an RE2 pattern matched whole. A '[' without its ']' is a plain character, as fnmatch has it.
std::string glob_to_re2(const std::string& glob) {
  std::string out = "(?is)";
  auto literal = [&](char c) {
    if (is_ascii_punct(c)) out += '\\';
    out += c;
  };
  for (size_t i = 0; i < glob.size(); ++i) {
    const char c = glob[i];
    if (c == '*') out += ".*";
    else if (c == '?') out += '.';
    else if (c == '\\' && i + 1 < glob.size()) literal(glob[++i]);
    else if (c == '[') {
      size_t j = i + 1;
      const bool negate = j < glob.size() && (glob[j] == '!' || glob[j] == '^');
      if (negate) ++j;
      size_t end = glob.find(']', j < glob.size() && glob[j] == ']' ? j + 1 : j);
      if (end == std::string::npos) {
        literal(c);
        continue;
      }
      out += negate ? "[^" : "[";
      for (size_t k = j; k < end; ++k) {
        if (glob[k] == '-' && k != j && k + 1 != end) out += '-';
        else literal(glob[k]);
      }
      out += ']';
      i = end;
    } else {
      literal(c);
    }
  }
  return out;
}

std::vector<std::string> tokenize(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (char c : s) {
    if (c == ' ' || c == '\t') flush();
    else if (c == '(' || c == ')') { flush(); out.emplace_back(1, c); }
    else cur += c;
  }
  flush();
  return out;
}

// Recursive descent: or := and ('or' and)*; and := unary ('and' unary)*; unary := 'not' unary | '(' or ')' | word.
class Parser {
 public:
  explicit Parser(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

  NodePtr parse(std::string& error) {
    if (tokens_.size() > kMaxTokens) {
      error = "more than " + std::to_string(kMaxTokens) + " words and operators";
      return nullptr;
    }
    NodePtr n = parse_or(error);
    if (n && pos_ < tokens_.size()) {
      error = "unexpected '" + tokens_[pos_] + "'";
      return nullptr;
    }
    return n;
  }

 private:
  bool at(const char* word) const { return pos_ < tokens_.size() && tokens_[pos_] == word; }

  NodePtr binary(JobFilter::Node::Kind kind, NodePtr l, NodePtr r) {
    auto n = std::make_shared<JobFilter::Node>();
    n->kind = kind;
    n->left = std::move(l);
    n->right = std::move(r);
    return n;
  }

  NodePtr parse_or(std::string& error) {
    NodePtr l = parse_and(error);
    while (l && at("or")) {
      ++pos_;
      NodePtr r = parse_and(error);
      if (!r) return nullptr;
      l = binary(JobFilter::Node::Kind::or_, l, r);
    }
    return l;
  }
  NodePtr parse_and(std::string& error) {
    NodePtr l = parse_unary(error);
    while (l && at("and")) {
      ++pos_;
      NodePtr r = parse_unary(error);
      if (!r) return nullptr;
      l = binary(JobFilter::Node::Kind::and_, l, r);
    }
    return l;
  }
  NodePtr parse_unary(std::string& error) {
    if (pos_ >= tokens_.size()) {
      error = "the expression ends where a word was expected";
      return nullptr;
    }
    const std::string& t = tokens_[pos_];
    if ((t == "not" || t == "(") && depth_ >= kMaxDepth) {
      error = "nested deeper than " + std::to_string(kMaxDepth) + " levels of parentheses and 'not'";
      return nullptr;
    }
    if (t == "not") {
      ++pos_;
      ++depth_;
      NodePtr inner = parse_unary(error);
      --depth_;
      if (!inner) return nullptr;
      return binary(JobFilter::Node::Kind::not_, inner, nullptr);
    }
    if (t == "(") {
      ++pos_;
      ++depth_;
      NodePtr inner = parse_or(error);
      --depth_;
      if (!inner) return nullptr;
      if (!at(")")) {
        error = "missing ')'";
        return nullptr;
      }
      ++pos_;
      return inner;
    }
    if (t == ")" || t == "and" || t == "or") {
      error = "unexpected '" + t + "' where a word was expected";
      return nullptr;
    }
    ++pos_;
    auto n = std::make_shared<JobFilter::Node>();
    n->word = app::to_lower(t);
    if (t.find_first_of("*?[") != std::string::npos) {
      RE2::Options options;
      options.set_log_errors(false);
      auto re = std::make_shared<const RE2>(glob_to_re2(t), options);
      if (!re->ok()) {
        error = "bad glob '" + t + "': " + re->error();
        return nullptr;
      }
      n->glob = std::move(re);
    }
    return n;
  }

  std::vector<std::string> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Expected<JobFilter, std::string> JobFilter::parse(const std::string& expression) {
  using Result = Expected<JobFilter, std::string>;
  auto tokens = tokenize(expression);
  if (tokens.empty()) return Result::failure("bad -k '" + expression + "': empty expression");
  std::string error;
  Parser parser(std::move(tokens));
  NodePtr root = parser.parse(error);
  if (!root) return Result::failure("bad -k '" + expression + "': " + error);
  JobFilter f;
  f.expression_ = expression;
  f.root_ = std::move(root);
  return Result::success(std::move(f));
}

bool JobFilter::matches(const std::string& suite, const std::string& job) const {
  if (!root_) return true;
  std::string full = suite + "::" + job;
  return root_->eval(app::to_lower(full), full, job);
}

}  // namespace oomh
