#pragma once
// Internal: the path-naming errors of Note [Reading results back] (result.cpp).

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace oomh::detail {

class FieldError : public std::runtime_error {
 public:
  FieldError(std::string path, std::string problem);
  const std::string& path() const { return path_; }
  const std::string& problem() const { return problem_; }
  FieldError within(const std::string& parent) const;  // the same error, one level up

 private:
  std::string path_, problem_;
};

std::string clean_json_error(const char* what);

// The member, or nullptr when it is absent or null; throws FieldError when `j` is not an object.
const nlohmann::json* member(const nlohmann::json& j, const char* key);
const nlohmann::json& required(const nlohmann::json& j, const char* key);

// Runs f; errors it throws are reported under `name` (a key, or "[i]").
template <class F>
void within(const std::string& name, F&& f) {
  try {
    f();
  } catch (const FieldError& e) {
    throw e.within(name);
  } catch (const nlohmann::json::exception& e) {
    throw FieldError(name, clean_json_error(e.what()));
  } catch (const std::exception& e) {  // a nested model's own check (a verdict's unknown status)
    throw FieldError(name, e.what());
  }
}

}  // namespace oomh::detail
