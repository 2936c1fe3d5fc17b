// `-k EXPR`: which jobs of the loaded suites run, chosen the way pytest's `-k` chooses tests.
//
// The expression is words joined by `and`, `or`, `not` and parentheses (pytest's grammar). A word
// matches a job when the job's full name `suite::job` contains it, ignoring case (pytest's rule), or,
// when the word has a glob character (`*`, `?`, `[`), when the full name or the job's own name matches
// it as a glob: `-k 'halv*'` and `-k 'demo::*'` both do what they look like.

#include <fnmatch.h>

#include "app/spec_text.h"
#include "oomharness/runner/cli_specs.h"

namespace oomh {

struct JobFilter::Node {
  enum class Kind { word, and_, or_, not_ } kind = Kind::word;
  std::string word;  // lower-cased, for Kind::word
  std::shared_ptr<const Node> left, right;

  bool eval(const std::string& full_lower, const std::string& full, const std::string& job) const {
    switch (kind) {
      case Kind::and_: return left->eval(full_lower, full, job) && right->eval(full_lower, full, job);
      case Kind::or_: return left->eval(full_lower, full, job) || right->eval(full_lower, full, job);
      case Kind::not_: return !left->eval(full_lower, full, job);
      case Kind::word: break;
    }
    if (word.find_first_of("*?[") != std::string::npos)
      return fnmatch(word.c_str(), full.c_str(), FNM_CASEFOLD) == 0 || fnmatch(word.c_str(), job.c_str(), FNM_CASEFOLD) == 0;
    return full_lower.find(word) != std::string::npos;
  }
};

namespace {

using NodePtr = std::shared_ptr<const JobFilter::Node>;

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
    if (t == "not") {
      ++pos_;
      NodePtr inner = parse_unary(error);
      if (!inner) return nullptr;
      return binary(JobFilter::Node::Kind::not_, inner, nullptr);
    }
    if (t == "(") {
      ++pos_;
      NodePtr inner = parse_or(error);
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
    return n;
  }

  std::vector<std::string> tokens_;
  size_t pos_ = 0;
};

}  // namespace

SpecResult<JobFilter> JobFilter::parse(const std::string& expression) {
  SpecResult<JobFilter> out;
  auto tokens = tokenize(expression);
  if (tokens.empty()) {
    out.error = "bad -k '" + expression + "': empty expression";
    return out;
  }
  std::string error;
  Parser parser(std::move(tokens));
  NodePtr root = parser.parse(error);
  if (!root) {
    out.error = "bad -k '" + expression + "': " + error;
    return out;
  }
  JobFilter f;
  f.expression_ = expression;
  f.root_ = std::move(root);
  out.value = std::move(f);
  return out;
}

bool JobFilter::matches(const std::string& suite, const std::string& job) const {
  if (!root_) return true;
  std::string full = suite + "::" + job;
  return root_->eval(app::to_lower(full), full, job);
}

}  // namespace oomh
