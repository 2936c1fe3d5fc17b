// `--expect POLICY[:ARGS]`: one recovery check from the policy registry, as a suite's `expect:` entry.
//
//   --expect batch_halving                      the policy with its defaults
//   --expect batch_halving:factor=0.5,min=8     keyword arguments (the registry's names and types)
//   --expect exit=0   --expect peak_below:8GiB  a bare value, for policies that take one (`- exit: 0`)
//
// Values are typed by the registry's ArgSpec (integers, numbers, booleans, sizes, durations, strings,
// JSON objects), then checked and normalised by `normalise_args`, the same path a suite's entries take.

#include "app/spec_text.h"
#include "oomharness/policies/registry.h"
#include "oomharness/runner/cli_specs.h"

namespace oomh {

namespace {

std::vector<std::string> policy_names() {
  std::vector<std::string> out;
  for (const auto& p : policies()) out.push_back(p.name);
  return out;
}

std::vector<std::string> arg_names(const PolicyInfo& p) {
  std::vector<std::string> out;
  for (const auto& a : p.args) out.push_back(a.name);
  return out;
}

// Types a command-line value by the argument's spec. Sizes and durations stay strings unless they are
// bare numbers: normalise_args reads both.
std::optional<nlohmann::json> typed_value(const ArgSpec& spec, const std::string& v, std::string& error) {
  auto bad = [&](const char* what) {
    error = "argument '" + spec.name + "' must be " + what + ", not '" + v + "'";
    return std::nullopt;
  };
  switch (spec.type) {
    case ArgType::integer: {
      auto n = app::parse_integer(v);
      if (!n) return bad("a whole number");
      return *n;
    }
    case ArgType::number: {
      auto n = app::parse_number(v);
      if (!n) return bad("a number");
      return *n;
    }
    case ArgType::boolean: {
      auto b = app::parse_boolean(v);
      if (!b) return bad("true or false");
      return *b;
    }
    case ArgType::bytes: {
      if (auto n = app::parse_integer(v)) return *n;
      return v;
    }
    case ArgType::duration: {
      if (auto n = app::parse_number(v)) return *n;
      return v;
    }
    case ArgType::string: return v;
    case ArgType::object: {
      // checkpoint_resume's `reference` also takes `true` for its defaults.
      if (auto b = app::parse_boolean(v)) return *b;
      nlohmann::json j = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return bad("a JSON object like {\"steps\":10}");
      return j;
    }
  }
  return std::nullopt;
}

}  // namespace

Expected<ExpectSpec, std::string> parse_expect_spec(const std::string& text) {
  auto fail = [&](const std::string& why) {
    return Expected<ExpectSpec, std::string>::failure("bad --expect '" + text + "': " + why);
  };
  // The policy name ends at the first ':' or '='.
  size_t cut = text.find_first_of(":=");
  std::string name = text.substr(0, cut);
  while (!name.empty() && name.back() == ' ') name.pop_back();
  if (name.empty()) return fail("no policy name (write e.g. batch_halving:factor=0.5 or exit=0)");
  const PolicyInfo* policy = find_policy(name);
  if (!policy) {
    auto guess = app::closest(name, policy_names());
    return fail("unknown policy '" + name + "'" +
                (guess ? " (did you mean '" + *guess + "'?)" : " (known: " + app::join(policy_names()) + ")"));
  }

  nlohmann::json args = nlohmann::json::object();
  std::string rest = cut == std::string::npos ? std::string() : text.substr(cut + 1);
  // `exit=0` and `peak_below:8GiB` are bare values; `batch_halving:no_sample_loss` is a flag.
  bool scalar = cut != std::string::npos &&
                (text[cut] == '=' || (rest.find('=') == std::string::npos && policy->scalar_arg));
  if (cut != std::string::npos && rest.empty()) return fail("nothing after '" + std::string(1, text[cut]) + "'");
  std::string error;
  if (scalar && !rest.empty()) {
    if (!policy->scalar_arg || policy->args.empty())
      return fail("policy '" + name + "' takes named arguments (" + app::join(arg_names(*policy)) +
                  "): write " + name + ":NAME=VALUE");
    auto v = typed_value(policy->args.front(), rest, error);
    if (!v) return fail(error);
    args[policy->args.front().name] = *v;
  } else if (!rest.empty()) {
    for (const auto& item : app::split_items(rest)) {
      if (item.empty()) return fail("empty argument (two commas in a row?)");
      auto [key, value] = app::split_key_value(item);
      const ArgSpec* spec = nullptr;
      for (const auto& a : policy->args)
        if (a.name == key) spec = &a;
      if (!spec) {
        auto names = arg_names(*policy);
        auto guess = app::closest(key, names);
        return fail("policy '" + name + "' has no argument '" + key + "'" +
                    (guess ? " (did you mean '" + *guess + "'?)"
                           : names.empty() ? " (it takes none)" : " (it takes " + app::join(names) + ")"));
      }
      if (!value) {
        if (spec->type != ArgType::boolean) return fail("argument '" + key + "' needs a value ('" + key + "=...')");
        value = "true";
      }
      if (args.contains(key)) return fail("argument '" + key + "' is given twice");
      auto v = typed_value(*spec, *value, error);
      if (!v) return fail(error);
      args[key] = *v;
    }
  }
  Expected<nlohmann::json> normalised = normalise_args(*policy, std::move(args));
  if (!normalised) return fail(normalised.error().message);  // Note [A policy argument's error]

  ExpectSpec spec;
  spec.policy = policy->name;
  spec.args = std::move(normalised).value();
  spec.where = SourceLocation{"<command line>", 0, 0};
  return Expected<ExpectSpec, std::string>::success(std::move(spec));
}

}  // namespace oomh
