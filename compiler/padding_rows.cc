#include "compiler/padding_rows.h"

#include <nlohmann/json.hpp>

#include "base/quote.h"

namespace foundry {

StatusOr<std::map<std::string, int64_t>> PaddingRows(const Graph& g, bool require_present) {
  std::map<std::string, int64_t> rows;
  auto it = g.metadata.find(kPaddingIdxKey);
  if (it == g.metadata.end()) return rows;
  const std::string what = std::string("model metadata '") + kPaddingIdxKey + "'";
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    return Error(what + " is not a JSON object of parameter name -> padding row (e.g. " +
                 "{\"bert.embeddings.word_embeddings.weight\": 0}); fix or remove the key");
  for (auto e = j.begin(); e != j.end(); ++e) {
    const std::string& name = e.key();
    if (!e.value().is_number_integer())
      return Error(what + ": the row of " + QuoteName(name) + " is not an integer");
    const Value* v = g.FindValue(name);
    if (!v || !g.IsInitializer(name)) {
      if (!require_present) continue;
      return Error(what + " names " + QuoteName(name) +
                   ", which is not an initializer of the model; fix or remove the key");
    }
    const int64_t row = e.value().get<int64_t>();
    if (!v->rank_known || v->shape.empty() || row < 0 || (v->shape[0] >= 0 && row >= v->shape[0]))
      return Error(what + ": row " + std::to_string(row) + " of " + QuoteName(name) + " (" +
                   v->TypeString() + ") is out of range");
    rows[name] = row;
  }
  return rows;
}

}  // namespace foundry
