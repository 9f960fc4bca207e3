// The "scopes" format: TorchScript scoped node names.
#include <algorithm>
#include <limits>
#include <set>
#include <unordered_set>

#include "compiler/import_annotation.h"

namespace foundry {
namespace import_internal {

namespace {

// "/transformer/blocks.0/attn/MatMul_1" -> "/transformer/blocks.0/attn"; unscoped -> "".
std::string NodeNameScope(const std::string& name) {
  if (name.empty() || name[0] != '/') return "";
  return name.substr(0, name.rfind('/'));
}

// torch.onnx's scope segment for a module path: the last non-numeric atom and what follows
// ("transformer.blocks.0" -> "blocks.0").
std::string UnqualifiedName(const std::string& path) {
  size_t end = path.size();
  for (;;) {
    size_t dot = path.rfind('.', end == 0 ? 0 : end - 1);
    size_t start = dot == std::string::npos ? 0 : dot + 1;
    std::string atom = path.substr(start, end - start);
    bool numeric = !atom.empty() && std::all_of(atom.begin(), atom.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!numeric || start == 0) return path.substr(start);
    end = dot;
  }
}

// TorchScript scope strings ("/transformer/blocks.0/attn") -> chains of module paths
// (["", "transformer", "transformer.blocks.0", "transformer.blocks.0.attn"]). torch names each
// segment after the called module relative to its *caller*, which is not always its parent
// (`self.transformer.wte(x)` called from the root is "/wte"); `foundry.scopes` records the answer,
// the class table lets us search for it. A stock export has neither: there the initializer names
// stand in for the table. A segment whose joined path `caller.seg` holds no initializer resolves
// to the one shallowest module below the caller that is named `seg` and holds initializers
// (MPT's tied head "/wte" -> "transformer.wte", which holds transformer.wte.weight); otherwise,
// and always for modules without weights, the segments are joined with '.'.
class ScopeResolver {
 public:
  ScopeResolver(const ClassTable& table, std::map<std::string, std::string> scopes,
                const std::unordered_set<std::string>& initializers)
      : table_(table), scopes_(std::move(scopes)) {
    cache_[""] = {""};
    if (table_.present) return;
    for (const std::string& name : initializers)
      for (std::string p = ParentPath(name); !p.empty(); p = ParentPath(p)) owners_.insert(p);
  }

  const std::vector<std::string>& Chain(const std::string& scope) {
    auto it = cache_.find(scope);
    if (it != cache_.end()) return it->second;
    size_t slash = scope.rfind('/');
    std::string parent_scope = slash == std::string::npos ? "" : scope.substr(0, slash);
    std::string seg = slash == std::string::npos ? scope : scope.substr(slash + 1);
    std::vector<std::string> chain = Chain(parent_scope);
    const std::string& cur = chain.back();
    std::string path;
    auto known = scopes_.find(scope);
    if (known != scopes_.end()) {
      path = known->second;
    } else if (const std::string* again = RepeatedCall(parent_scope, seg, cur)) {
      path = *again;
    } else {
      path = table_.present ? Search(cur, seg) : SearchOwners(cur, seg);
      if (path.empty()) path = cur.empty() ? seg : cur + "." + seg;
    }
    chain.push_back(path);
    return cache_[scope] = std::move(chain);
  }

 private:
  std::string Search(const std::string& cur, const std::string& seg) const {
    if (!table_.present) return "";
    std::vector<std::string> found;
    int best = std::numeric_limits<int>::max();
    for (const std::string& p : table_.order) {
      if (p.empty() || p == cur || !IsInside(p, cur) || UnqualifiedName(p) != seg) continue;
      int d = Depth(p);
      if (d < best) {
        best = d;
        found.clear();
      }
      if (d == best) found.push_back(p);
    }
    return found.size() == 1 ? found[0] : "";
  }

  std::string SearchOwners(const std::string& cur, const std::string& seg) const {
    if (owners_.count(cur.empty() ? seg : cur + "." + seg)) return "";
    std::vector<std::string> found;
    int best = std::numeric_limits<int>::max();
    for (const std::string& p : owners_) {
      if (!IsInside(p, cur) || UnqualifiedName(p) != seg) continue;
      int d = Depth(p);
      if (d < best) {
        best = d;
        found.clear();
      }
      if (d == best) found.push_back(p);
    }
    return found.size() == 1 ? found[0] : "";
  }

  // torch numbers the scope of a module's second call `seg_1` (third `seg_2`, ...): when the same
  // caller already called `seg` and no module `seg_N` holds an initializer (or, with a class
  // table, exists), the call is `seg`'s, and its nodes belong to that one module. Null otherwise.
  const std::string* RepeatedCall(const std::string& parent_scope, const std::string& seg,
                                  const std::string& cur) const {
    size_t us = seg.rfind('_');
    if (us == std::string::npos || us == 0 || us + 1 == seg.size()) return nullptr;
    if (!std::all_of(seg.begin() + us + 1, seg.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      return nullptr;
    const std::string joined = cur.empty() ? seg : cur + "." + seg;
    if (owners_.count(joined) || (table_.present && table_.Find(joined))) return nullptr;
    auto first = cache_.find(parent_scope + "/" + seg.substr(0, us));
    return first == cache_.end() ? nullptr : &first->second.back();
  }

  const ClassTable& table_;
  std::map<std::string, std::string> scopes_;
  std::set<std::string> owners_;  // modules holding an initializer (no class table only)
  std::map<std::string, std::vector<std::string>> cache_;
};

class ScopesReader : public AnnotationReader {
 public:
  explicit ScopesReader(const ImportContext& ctx)
      : resolver_(ctx.table, ctx.scopes, ctx.init_names) {}
  const char* format() const override { return "scopes"; }
  Status Read(const onnx::NodeProto& n, NodeAnnotation& out) override {
    out.chain = resolver_.Chain(NodeNameScope(n.name()));
    return Status::Ok();
  }
  void Finish(ImportContext& ctx) override { FinishDerivedModules(ctx); }

 private:
  ScopeResolver resolver_;
};

}  // namespace

std::unique_ptr<AnnotationReader> MakeScopesReader(ImportContext& ctx) {
  return std::make_unique<ScopesReader>(ctx);
}

}  // namespace import_internal
}  // namespace foundry
