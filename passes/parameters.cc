#include "passes/parameters.h"

#include <set>

#include "base/tensor.h"

namespace foundry {

bool GlobMatch(std::string_view p, std::string_view t) {
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

StatusOr<bool> ParametersPass::Run(Graph& g) {
  auto is_float = [&](const std::string& name) {
    const Value* v = g.FindValue(name);
    return v && IsFloat(v->dtype);
  };
  for (const auto& pat : options_.freeze) {
    bool any = false;
    for (const auto& p : g.parameters) any |= GlobMatch(pat, p);
    if (!any) return Error("parameters: --freeze " + pat + " matches no parameter");
  }
  for (const auto& pat : options_.trainable) {
    bool any = false;
    for (const auto& p : g.initializers) any |= GlobMatch(pat, p) && is_float(p);
    if (!any) return Error("parameters: --trainable " + pat + " matches no float initializer");
  }
  const std::set<std::string> before(g.parameters.begin(), g.parameters.end());
  std::vector<std::string> trainable;
  stats_ = {};
  for (const auto& init : g.initializers) {
    if (!is_float(init)) continue;
    const bool was = before.count(init) > 0;
    bool is_param = was;
    for (const auto& pat : options_.trainable) is_param |= GlobMatch(pat, init);
    for (const auto& pat : options_.freeze) is_param &= !GlobMatch(pat, init);
    stats_.frozen += was && !is_param;
    stats_.added += !was && is_param;
    if (is_param && !was) {
      const Value* v = g.FindValue(init);
      if (v && v->data && !AllFinite(*v->data))
        return Error("parameters: --trainable selects '" + init +
                     "', which holds non-finite values (a -inf mask?): a buffer that cannot be "
                     "trained; narrow the glob");
    }
    if (is_param) trainable.push_back(init);
  }
  stats_.trainable = static_cast<int>(trainable.size());
  const bool changed = trainable != g.parameters;
  g.parameters = std::move(trainable);
  return changed;
}

std::string ParametersStats::ToString() const {
  return std::to_string(trainable) + " trainable (" + std::to_string(frozen) +
         " frozen by --freeze, " + std::to_string(added) + " added by --trainable)";
}

}  // namespace foundry
