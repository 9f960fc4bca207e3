// The one (domain, op_type) -> T table behind op schemas (compiler/op_schema.h), CPU kernels
// (kernels/cpu/kernel.h) and gradient rules (passes/grad/grad_rule.h): hashed lookup, rows kept
// in registration order for listings, "" and "ai.onnx" the same domain. Registering an op twice
// keeps the first row and records the op in duplicates(), which each table's test asserts empty.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace foundry {

// "" and "ai.onnx" are the same domain.
inline std::string CanonicalDomain(std::string_view domain) {
  return domain == "ai.onnx" ? std::string() : std::string(domain);
}

template <class T>
class OpTable {
 public:
  struct Row {
    std::string domain;  // canonical
    std::string op_type;
    T value;
  };

  void Add(std::string_view domain, std::string_view op_type, T value) {
    std::string d = CanonicalDomain(domain);
    auto [it, inserted] = index_.emplace(Key(d, op_type), rows_.size());
    if (!inserted) {
      duplicates_.push_back((d.empty() ? "" : d + "::") + std::string(op_type));
      return;
    }
    rows_.push_back(Row{std::move(d), std::string(op_type), std::move(value)});
  }
  // Null when the op is not in the table.
  const T* Find(std::string_view domain, std::string_view op_type) const {
    auto it = index_.find(Key(CanonicalDomain(domain), op_type));
    return it == index_.end() ? nullptr : &rows_[it->second].value;
  }
  const std::vector<Row>& rows() const { return rows_; }
  const std::vector<std::string>& duplicates() const { return duplicates_; }

 private:
  // '\n' appears in neither an ONNX domain nor an op type that any table registers.
  static std::string Key(std::string_view domain, std::string_view op_type) {
    std::string key;
    key.reserve(domain.size() + 1 + op_type.size());
    key.append(domain).push_back('\n');
    key.append(op_type);
    return key;
  }

  std::unordered_map<std::string, size_t> index_;
  std::vector<Row> rows_;
  std::vector<std::string> duplicates_;
};

}  // namespace foundry
