#include "runtime/executor.h"

#include <chrono>
#include <set>

#include "base/quote.h"
#include "runtime/interpreter.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace {

std::string PlannedFor(const MemoryPlan& plan) {
  std::vector<std::string> names;
  for (const auto& l : plan.layouts) names.push_back(l.backend);
  return JoinNames(names);
}

}  // namespace

StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const Graph& graph, const MemoryPlan& plan, Backend& backend,
    const std::map<std::string, Tensor*>& parameters, const Executor* lender) {
  std::unique_ptr<Executor> e(new Executor(graph, plan, backend));
  e->layout_ = e->plan_.Layout(backend.name());
  if (!e->layout_)
    return Error("the memory plan has no layout for the " + std::string(backend.name()) +
                 " backend (planned for: " + PlannedFor(plan) +
                 "); recompile it with foundry-compile for this backend");
  const BackendLayout& layout = *e->layout_;
  const WorkspaceFn workspace = backend.Spec().workspace;
  RETURN_IF_ERROR(CheckLayout(graph, e->plan_, layout, &workspace));

  auto type_of = [&](const std::string& name) -> StatusOr<const Value*> {
    const Value* v = graph.FindValue(name);
    if (!v || !v->ShapeKnown())
      return Error("value " + QuoteName(name) +
                   " has no concrete shape; bind symbolic dimensions with --dim");
    return v;
  };
  // The lender's storage of a value of the same name and type, when it has one.
  auto borrowed = [&](const std::string& name, const Value& v) -> const Tensor* {
    if (!lender) return nullptr;
    auto it = lender->views_.find(name);
    if (it == lender->views_.end() || it->second.dtype() != v.dtype ||
        it->second.shape() != v.shape)
      return nullptr;
    return &it->second;
  };
  auto region_view = [&](const std::string& name, MemoryClass c,
                         const std::string& what) -> Status {
    ASSIGN_OR_RETURN(const Value* v, type_of(name));
    if (const Tensor* t = borrowed(name, *v)) {
      e->views_[name] = Tensor::View(t->dtype(), t->shape(), const_cast<void*>(t->raw()));
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(int64_t bytes, CheckTensorSize(v->dtype, v->shape));
    ASSIGN_OR_RETURN(Region r, backend.Allocate(bytes, c, what + " " + QuoteName(name)));
    e->views_[name] = Tensor::View(v->dtype, v->shape, r.data());
    e->regions_.push_back(std::move(r));
    return Status::Ok();
  };

  if (lender && &lender->backend_ == &backend && layout.arena_bytes <= lender->arena_bytes_) {
    e->arena_base_ = lender->arena_base_;
    e->arena_bytes_ = lender->arena_bytes_;
  } else {
    ASSIGN_OR_RETURN(e->arena_,
                     backend.Allocate(layout.arena_bytes, MemoryClass::kArena, "the arena"));
    e->arena_base_ = e->arena_.data();
    e->arena_bytes_ = layout.arena_bytes;
  }

  std::set<std::string> produced;
  for (const Node& n : graph.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) produced.insert(o);

  // Parameters: the caller's tensors.
  for (const auto& name : graph.parameters)
    if (!parameters.count(name) || !parameters.at(name))
      return Error("parameter " + QuoteName(name) + " has no tensor bound to it");
  for (const auto& [name, tensor] : parameters) {
    ASSIGN_OR_RETURN(const Value* v, type_of(name));
    Tensor& t = *tensor;
    if (t.dtype() != v->dtype || t.shape() != v->shape)
      return Error("parameter " + QuoteName(name) + " is " + TypeOf(t.dtype(), t.shape()) +
                   " but the graph has " + v->TypeString());
    e->views_[name] = Tensor::View(t.dtype(), t.shape(), t.raw());
  }
  // Inputs: storage of their own.
  for (const auto& name : graph.inputs)
    RETURN_IF_ERROR(region_view(name, MemoryClass::kInput, "input"));
  // Constants: the graph's data; on a device backend, a copy of it in device memory (class
  // constant). Kernels also get the host copy (KernelContext::constant_inputs).
  for (const auto& [name, v] : graph.values()) {
    // A value a node produces is the node's to write, in the plan's storage, even if it has data.
    if (!v.data || e->views_.count(name) || produced.count(name)) continue;
    v.data->SetMemoryClass(MemoryClass::kConstant);
    e->host_constants_[name] = v.data.get();
    if (const Tensor* t = borrowed(name, v)) {
      e->views_[name] = Tensor::View(t->dtype(), t->shape(), const_cast<void*>(t->raw()));
      continue;
    }
    if (backend.host_memory()) {
      e->views_[name] =
          Tensor::View(v.data->dtype(), v.data->shape(), const_cast<void*>(v.data->raw()));
      continue;
    }
    ASSIGN_OR_RETURN(
        Region r, backend.Allocate(static_cast<int64_t>(v.data->nbytes()), MemoryClass::kConstant,
                                   "constant " + QuoteName(name)));
    e->views_[name] = Tensor::View(v.data->dtype(), v.data->shape(), r.data());
    e->regions_.push_back(std::move(r));
    RETURN_IF_ERROR(backend.CopyIn(*v.data, e->views_.at(name)));
  }
  for (const auto& name : graph.initializers)
    if (!e->views_.count(name))
      return Error("initializer " + QuoteName(name) +
                   " has no data and is not a trained parameter; export the model with its "
                   "buffers");
  // Graph outputs: storage of their own (a constant output gets its value once, here).
  for (const auto& name : graph.outputs) {
    if (produced.count(name)) {
      // A gradient the plan keeps in the arena is placed with the transients below.
      if (!e->views_.count(name) && !InArena(graph, e->plan_, name))
        RETURN_IF_ERROR(region_view(
            name, ClassOf(graph, e->plan_, name),
            ClassOf(graph, e->plan_, name) == MemoryClass::kGradient ? "gradient" : "output"));
      continue;
    }
    const Value* v = graph.FindValue(name);
    if (!v || !v->data)
      return Error("graph output " + QuoteName(name) +
                   " is neither computed by a node nor a constant; the planned executor cannot "
                   "produce it");
    Tensor source =
        Tensor::View(v->data->dtype(), v->data->shape(), const_cast<void*>(v->data->raw()));
    RETURN_IF_ERROR(region_view(name, ClassOf(graph, e->plan_, name), "output"));
    RETURN_IF_ERROR(backend.CopyIn(source, e->views_.at(name)));
  }
  // Transients: views into the arena, buffer owners first, then aliases at their owner's bytes.
  std::vector<std::string> aliased;
  for (const Node& n : graph.nodes) {
    for (const auto& name : n.outputs) {
      if (name.empty() || e->views_.count(name)) continue;
      if (e->plan_.alias.count(name)) {
        aliased.push_back(name);
        continue;
      }
      ASSIGN_OR_RETURN(const Value* v, type_of(name));
      std::byte* data = e->arena_base_;
      if (NumElements(v->shape) > 0) {
        auto off = layout.offsets.find(name);
        if (off == layout.offsets.end())
          return Error("value " + QuoteName(name) + " of " + n.Describe() +
                       " has no offset in the " + layout.backend + " arena; recompile the plan");
        data += off->second;
      }
      e->views_[name] = Tensor::View(v->dtype, v->shape, data);
    }
  }
  for (const auto& name : aliased) {
    const std::string& owner = e->plan_.alias.at(name).owner;
    auto it = e->views_.find(owner);
    if (it == e->views_.end())
      return Error("value " + QuoteName(name) + " is an alias of " + QuoteName(owner) +
                   ", which has no storage; recompile the plan");
    ASSIGN_OR_RETURN(const Value* v, type_of(name));
    e->views_[name] = Tensor::View(v->dtype, v->shape, it->second.raw());
  }

  // The schedule, resolved once.
  e->omitted_output_ = Tensor::View(DType::kFloat32, {0}, e->arena_base_);
  e->steps_.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    Step s{&n, backend.Prepare(n), {}, {}, {}, NodeKey(n), {}};
    for (const auto& in : n.inputs) {
      auto host = in.empty() ? e->host_constants_.end() : e->host_constants_.find(in);
      s.constants.push_back(host == e->host_constants_.end() ? nullptr : host->second);
      if (in.empty()) {
        s.inputs.push_back(nullptr);
        continue;
      }
      auto it = e->views_.find(in);
      if (it == e->views_.end())
        return Error(n.Describe() + ": input " + QuoteName(in) + " has no storage in the plan");
      s.inputs.push_back(&it->second);
    }
    for (const auto& out : n.outputs)
      s.outputs.push_back(out.empty() ? &e->omitted_output_ : &e->views_.at(out));
    if (i < layout.workspace_bytes.size() && layout.workspace_bytes[i] > 0)
      s.workspace = std::span<std::byte>(e->arena_base_ + layout.workspace_offsets[i],
                                         static_cast<size_t>(layout.workspace_bytes[i]));
    e->steps_.push_back(std::move(s));
  }
  return e;
}

Status Executor::Run(const KernelContext& ctx) {
  KernelContext c = ctx;
  if (profile_) {
    using Clock = std::chrono::steady_clock;
    Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      c.node_key = s.node_key;
      c.constant_inputs = s.constants;
      RETURN_IF_ERROR(
          backend_.RunPrepared(s.prepared, *s.node, s.inputs, s.outputs, s.workspace, c));
      const Clock::time_point t1 = Clock::now();
      node_seconds_[i] += std::chrono::duration<double>(t1 - t0).count();
      t0 = t1;
    }
    return Status::Ok();
  }
  for (const Step& s : steps_) {
    c.node_key = s.node_key;
    c.constant_inputs = s.constants;
    RETURN_IF_ERROR(backend_.RunPrepared(s.prepared, *s.node, s.inputs, s.outputs, s.workspace, c));
  }
  return Status::Ok();
}

void Executor::set_profile(bool on) {
  profile_ = on;
  node_seconds_.assign(steps_.size(), 0.0);
}

Tensor* Executor::input(const std::string& name) {
  if (std::find(graph_.inputs.begin(), graph_.inputs.end(), name) == graph_.inputs.end())
    return nullptr;
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

const Tensor* Executor::value(const std::string& name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

int64_t Executor::allocated_bytes() const {
  int64_t n = arena_.bytes();
  for (const Region& r : regions_) n += r.bytes();
  return n;
}

}  // namespace foundry
