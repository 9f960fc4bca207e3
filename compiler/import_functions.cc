#include "compiler/import_functions.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "compiler/import_annotation.h"

namespace foundry {
namespace import_internal {

namespace {

constexpr int kMaxFunctionDepth = 64;
// Inlining is exponential in the nesting of calls; a file that expands past this is rejected.
constexpr int64_t kMaxInlinedNodes = 20'000'000;

// Top-level nodes, calls included, keep the annotation of the file's other format (the dynamo
// metadata or scoped names), if any.
class FunctionsReader : public AnnotationReader {
 public:
  explicit FunctionsReader(std::unique_ptr<AnnotationReader> top_level)
      : top_level_(std::move(top_level)) {}
  const char* format() const override { return "functions"; }
  Status Read(const onnx::NodeProto& n, NodeAnnotation& out) override {
    out.chain.clear();
    return top_level_ ? top_level_->Read(n, out) : Status::Ok();
  }
  void Finish(ImportContext& ctx) override { FinishDerivedModules(ctx); }

 private:
  std::unique_ptr<AnnotationReader> top_level_;
};

}  // namespace

std::unique_ptr<AnnotationReader> MakeFunctionsReader(std::unique_ptr<AnnotationReader> top_level) {
  return std::make_unique<FunctionsReader>(std::move(top_level));
}

// What a function body is inlined under.
struct FunctionInliner::CallFrame {
  std::unordered_map<std::string, std::string> rename;       // body name -> graph name
  std::unordered_map<std::string, std::string> out_map;      // formal output -> graph name
  std::map<std::string, const onnx::AttributeProto*> attrs;  // the call's attributes
  std::vector<std::string> chain;              // module paths from the root to this instance
  std::string prefix;                          // for names of inlined nodes and values
  std::map<std::string, int> paramless_calls;  // per class, for matching modules in order
};

FunctionInliner::FunctionInliner(ImportContext& ctx) : ctx_(ctx) {
  for (const auto& f : ctx.m.functions()) functions_[{f.domain(), f.name()}] = &f;
}

const onnx::FunctionProto* FunctionInliner::Find(const onnx::NodeProto& n) const {
  auto it = functions_.find({n.domain(), n.op_type()});
  return it == functions_.end() ? nullptr : it->second;
}

Status FunctionInliner::InlineTopLevel(
    const onnx::FunctionProto& f, const onnx::NodeProto& n,
    const std::map<std::string, const onnx::AttributeProto*>& attrs,
    const std::vector<std::string>& chain) {
  // A top-level call's annotation already names its own module; its caller is the parent.
  CallFrame root;
  root.chain = chain;
  if (root.chain.empty()) root.chain.push_back("");
  root.prefix = "";
  std::vector<std::string> inputs(n.input().begin(), n.input().end());
  std::vector<std::string> outputs(n.output().begin(), n.output().end());
  return Inline(f, n, inputs, outputs, attrs, root, /*top_level=*/true, 0);
}

Status FunctionInliner::CheckExpansion(const onnx::FunctionProto& f, const onnx::NodeProto& n) {
  std::string desc = n.op_type() + " node '" + n.name() + "'";
  std::set<const onnx::FunctionProto*> visiting;
  int64_t size = ExpandedSize(&f, visiting);
  if (size < 0) return ctx_.Fail(desc + ": function " + f.name() + " calls itself");
  if (size > kMaxInlinedNodes ||
      static_cast<int64_t>(ctx_.g.nodes.size()) + size > kMaxInlinedNodes)
    return ctx_.Fail(desc + ": inlining its functions makes more than " +
                     std::to_string(kMaxInlinedNodes) + " nodes");
  return Status::Ok();
}

// The number of nodes a call of `f` inlines to (saturating past kMaxInlinedNodes); -1 when `f`
// (transitively) calls itself.
int64_t FunctionInliner::ExpandedSize(const onnx::FunctionProto* f,
                                      std::set<const onnx::FunctionProto*>& visiting) {
  auto memo = expanded_size_.find(f);
  if (memo != expanded_size_.end()) return memo->second;
  if (!visiting.insert(f).second) return -1;
  int64_t total = 0;
  for (const auto& n : f->node()) {
    int64_t add = 1;
    if (const onnx::FunctionProto* nested = Find(n)) {
      add = ExpandedSize(nested, visiting);
      if (add < 0) return -1;
    }
    total = std::min(total + add, kMaxInlinedNodes + 1);
  }
  visiting.erase(f);
  return expanded_size_[f] = total;
}

// Where the parameters a call consumes live: `ParentPath(p)` for each parameter its body reads
// directly, and the parent of the instance of each nested call that consumes parameters (that
// instance is a child of this one). `use_buffers` counts every initializer, not only the
// trainable ones.
void FunctionInliner::DeriveOwners(const onnx::FunctionProto& f,
                                   const std::vector<std::string>& inputs, bool use_buffers,
                                   int depth, std::vector<std::string>& owners) {
  if (depth >= kMaxFunctionDepth) return;
  const auto& pool = use_buffers ? ctx_.init_names : ctx_.param_set;
  std::unordered_map<std::string, std::string> bound;
  for (int i = 0; i < f.input_size() && i < static_cast<int>(inputs.size()); ++i)
    bound[f.input(i)] = inputs[i];
  auto actual = [&](const std::string& name) {
    auto it = bound.find(name);
    return it == bound.end() ? std::string() : it->second;
  };
  for (const auto& n : f.node()) {
    if (const onnx::FunctionProto* nested = Find(n)) {
      std::vector<std::string> nested_inputs;
      for (const auto& in : n.input()) nested_inputs.push_back(actual(in));
      std::vector<std::string> nested_owners;
      DeriveOwners(*nested, nested_inputs, use_buffers, depth + 1, nested_owners);
      if (!nested_owners.empty())
        owners.push_back(ParentPath(ResolveInstance(*nested, CommonModulePrefix(nested_owners))));
      continue;
    }
    for (const auto& in : n.input()) {
      std::string a = actual(in);
      if (!a.empty() && pool.count(a)) owners.push_back(ParentPath(a));
    }
  }
}

// With a class table: the path itself or its nearest ancestor of the function's class.
std::string FunctionInliner::ResolveInstance(const onnx::FunctionProto& f,
                                             const std::string& path) const {
  if (!ctx_.table.present) return path;
  std::string cls = StripVariant(f.name());
  for (std::string p = path;; p = ParentPath(p)) {
    if (ctx_.table.HasClass(p, cls)) return p;
    if (p.empty()) break;
  }
  return path;
}

// Which module instance a call is: see the header comment ("functions"). Sets `identified`
// false when nothing names the instance and the caller's path is returned.
std::string FunctionInliner::InstancePath(const onnx::FunctionProto& f, const onnx::NodeProto& call,
                                          const std::vector<std::string>& inputs, CallFrame& caller,
                                          bool top_level, bool& identified) {
  identified = true;
  std::string cls = StripVariant(f.name());
  std::vector<std::string> owners;
  DeriveOwners(f, inputs, /*use_buffers=*/false, 0, owners);
  if (owners.empty()) DeriveOwners(f, inputs, /*use_buffers=*/true, 0, owners);
  if (!owners.empty()) return ResolveInstance(f, CommonModulePrefix(owners));
  if (top_level && ctx_.have_scoped_names && !call.name().empty() && call.name()[0] == '/')
    return caller.chain.back();
  const std::string& base = caller.chain.back();
  if (ctx_.table.present) {
    std::vector<std::string> found;
    int best = std::numeric_limits<int>::max();
    for (const std::string& p : ctx_.table.order) {
      if (!IsInside(p, base) || !ctx_.table.HasClass(p, cls)) continue;
      int d = Depth(p);
      if (d < best) {
        best = d;
        found.clear();
      }
      if (d == best) found.push_back(p);
    }
    int k = caller.paramless_calls[cls]++;
    if (k < static_cast<int>(found.size())) return found[k];
  }
  identified = false;
  return base;
}

Status FunctionInliner::Inline(const onnx::FunctionProto& f, const onnx::NodeProto& call,
                               const std::vector<std::string>& inputs,
                               const std::vector<std::string>& outputs,
                               const std::map<std::string, const onnx::AttributeProto*>& attrs,
                               CallFrame& caller, bool top_level, int depth) {
  std::string call_desc = call.op_type() + " node '" + call.name() + "'";
  if (depth >= kMaxFunctionDepth)
    return ctx_.Fail(call_desc + ": functions nest deeper than " +
                     std::to_string(kMaxFunctionDepth) + " calls (a recursive function?)");
  std::pair<std::string, std::string> key{f.domain(), f.name()};
  if (std::find(call_stack_.begin(), call_stack_.end(), key) != call_stack_.end())
    return ctx_.Fail("function " + f.domain() + "::" + f.name() + " calls itself");
  call_stack_.push_back(key);

  CallFrame frame;
  bool identified = true;
  std::string path = InstancePath(f, call, inputs, caller, top_level, identified);
  frame.chain = caller.chain;
  auto pos = std::find(frame.chain.begin(), frame.chain.end(), path);
  if (pos != frame.chain.end())
    frame.chain.erase(pos + 1, frame.chain.end());
  else
    frame.chain.push_back(path);
  ctx_.RecordChain(frame.chain);
  std::string cls = StripVariant(f.name());
  if (identified && !ctx_.annotated_class.count(path))
    ctx_.annotated_class[path] = f.domain().empty() ? cls : f.domain() + "." + cls;
  std::string call_name = call.name().empty() ? call.op_type() : call.name();
  frame.prefix = caller.prefix.empty() ? call_name : caller.prefix + "/" + call_name;
  frame.attrs = attrs;
  for (int i = 0; i < f.input_size(); ++i)
    frame.rename[f.input(i)] = i < static_cast<int>(inputs.size()) ? inputs[i] : "";
  for (int j = 0; j < f.output_size(); ++j) {
    std::string actual = j < static_cast<int>(outputs.size()) ? outputs[j] : "";
    if (actual.empty()) actual = ctx_.NewValueName(frame.prefix + "/" + f.output(j));
    frame.out_map[f.output(j)] = actual;
  }
  std::unordered_set<std::string> produced;

  for (const auto& inner : f.node()) {
    std::string desc = inner.op_type() + " node '" + inner.name() + "' in function " + f.name();
    std::vector<std::string> in_names;
    for (const auto& in : inner.input()) {
      auto it = frame.rename.find(in);
      in_names.push_back(in.empty() ? "" : it != frame.rename.end() ? it->second : in);
    }
    // Attributes, with references to the call's attributes resolved.
    std::vector<onnx::AttributeProto> resolved;
    for (const auto& a : inner.attribute()) {
      if (a.ref_attr_name().empty()) {
        resolved.push_back(a);
        continue;
      }
      auto it = frame.attrs.find(a.ref_attr_name());
      if (it == frame.attrs.end()) continue;  // not given at the call: the op's default
      onnx::AttributeProto copy = *it->second;
      copy.set_name(a.name());
      resolved.push_back(std::move(copy));
    }
    std::vector<std::string> out_names;
    for (const auto& out : inner.output()) {
      if (out.empty()) {
        out_names.push_back("");
        continue;
      }
      auto formal = frame.out_map.find(out);
      std::string name = formal != frame.out_map.end()
                             ? formal->second
                             : ctx_.NewValueName(frame.prefix + "/" + out);
      if (formal != frame.out_map.end()) produced.insert(out);
      frame.rename[out] = name;
      out_names.push_back(name);
    }
    std::string inner_name = inner.name().empty() ? inner.op_type() : inner.name();
    if (const onnx::FunctionProto* nested = Find(inner)) {
      std::map<std::string, const onnx::AttributeProto*> nested_attrs;
      for (const auto& a : resolved) nested_attrs[a.name()] = &a;
      onnx::NodeProto named = inner;
      named.set_name(inner_name);
      RETURN_IF_ERROR(
          Inline(*nested, named, in_names, out_names, nested_attrs, frame, false, depth + 1));
      continue;
    }
    Node node;
    node.name = frame.prefix + "/" + inner_name;
    node.op_type = inner.op_type();
    node.domain = inner.domain() == "ai.onnx" ? "" : inner.domain();
    node.inputs = std::move(in_names);
    node.outputs = std::move(out_names);
    node.scope = frame.chain.back();
    for (const auto& a : resolved) {
      ASSIGN_OR_RETURN(node.attrs[a.name()], ctx_.ConvertAttr(a, desc));
    }
    ctx_.g.nodes.push_back(std::move(node));
  }
  // A formal output no body node produced passes a value through (or an input) unchanged.
  for (int j = 0; j < f.output_size(); ++j) {
    if (produced.count(f.output(j))) continue;
    auto src = frame.rename.find(f.output(j));
    if (src == frame.rename.end() || src->second.empty())
      return ctx_.Fail(call_desc + ": function " + f.name() + " never produces its output '" +
                       f.output(j) + "'");
    Node id;
    id.name = frame.prefix + "/Identity_" + std::to_string(j);
    id.op_type = "Identity";
    id.inputs = {src->second};
    id.outputs = {frame.out_map[f.output(j)]};
    id.scope = frame.chain.back();
    ctx_.g.nodes.push_back(std::move(id));
  }
  call_stack_.pop_back();
  return Status::Ok();
}

}  // namespace import_internal
}  // namespace foundry
