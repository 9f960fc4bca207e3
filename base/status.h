// Errors are values: every fallible library function returns Status or StatusOr<T>. Nothing below
// a tool's main() prints or exits.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace foundry {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

  // Prefixes context ("while importing foo.onnx: ") to an error; a no-op on success.
  Status Prepend(const std::string& context) const {
    return ok() ? *this : Error(context + message_);
  }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

inline Status Error(std::string message) { return Status::Error(std::move(message)); }

template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}                      // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {}              // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace foundry

#define FOUNDRY_CONCAT_INNER_(a, b) a##b
#define FOUNDRY_CONCAT_(a, b) FOUNDRY_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::foundry::Status _st = (expr);                \
    if (!_st.ok()) return _st;                     \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(FOUNDRY_CONCAT_(_status_or_, __LINE__), lhs, expr)
