// An environment variable set (or unset) for the life of the object, restored afterwards: for
// tests of code that reads the environment (FOUNDRY_NCCL_LIBRARY, ...).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace foundry {

class ScopedEnv {
 public:
  // `value` null: unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_)
      setenv(name_.c_str(), saved_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace foundry
