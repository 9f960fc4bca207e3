// ParameterStore (runtime/parameter_store.h): the trained tensors on the host and the backend.
#include "runtime/parameter_store.h"

#include "base/memory_accounting.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

StatusOr<std::unique_ptr<ParameterStore>> ParameterStore::Create(
    Backend& backend, std::vector<std::string> names, std::map<std::string, Tensor> params,
    const OptimizerOptions& optimizer) {
  std::unique_ptr<ParameterStore> s(new ParameterStore(backend));
  s->names_ = std::move(names);
  s->params_ = std::move(params);
  // Optimizer slots, zero: what the first update starts from.
  {
    ScopedMemoryClass scope(MemoryClass::kOptimizerState);
    const bool adamw = IsAdam(optimizer.kind);
    for (const auto& name : s->names_) {
      const Shape& shape = s->params_.at(name).shape();
      if (adamw || optimizer.momentum != 0) {
        ASSIGN_OR_RETURN(s->m_[name], Tensor::Allocate(DType::kFloat32, shape));
      }
      if (adamw) {
        ASSIGN_OR_RETURN(s->v_[name], Tensor::Allocate(DType::kFloat32, shape));
      }
    }
  }
  RETURN_IF_ERROR(s->Mirror(s->params_, s->dev_params_, MemoryClass::kParameter, "parameter"));
  RETURN_IF_ERROR(s->Mirror(s->m_, s->dev_m_, MemoryClass::kOptimizerState, "optimizer slot"));
  RETURN_IF_ERROR(s->Mirror(s->v_, s->dev_v_, MemoryClass::kOptimizerState, "optimizer slot"));
  RETURN_IF_ERROR(s->Push());
  return s;
}

Status ParameterStore::Mirror(std::map<std::string, Tensor>& host,
                              std::map<std::string, Tensor*>& dev, MemoryClass c,
                              const std::string& what) {
  for (auto& [name, h] : host) {
    if (backend_.host_memory()) {
      dev[name] = &h;
      continue;
    }
    ASSIGN_OR_RETURN(
        Region r, backend_.Allocate(static_cast<int64_t>(h.nbytes()), c, what + " '" + name + "'"));
    dev[name] = &device_views_.emplace_back(Tensor::View(h.dtype(), h.shape(), r.data()));
    regions_.push_back(std::move(r));
  }
  return Status::Ok();
}

std::map<std::string, Tensor*> ParameterStore::BackendParameters() { return dev_params_; }

StatusOr<std::vector<ParameterUpdate>> ParameterStore::Updates(
    const std::vector<const Tensor*>& gradients, const std::vector<std::string>& gradient_names) {
  std::vector<ParameterUpdate> updates;
  for (size_t i = 0; i < names_.size(); ++i) {
    const std::string& name = names_[i];
    Tensor* param = dev_params_.at(name);
    const Tensor* grad = gradients.at(i);
    if (grad->dtype() != DType::kFloat32 || grad->shape() != param->shape())
      return Error("gradient '" + gradient_names.at(i) + "' is " +
                   TypeOf(grad->dtype(), grad->shape()) + " but parameter '" + name + "' is " +
                   TypeOf(param->dtype(), param->shape()));
    auto slot = [&](std::map<std::string, Tensor*>& slots) {
      auto it = slots.find(name);
      return it == slots.end() ? nullptr : it->second;
    };
    updates.push_back({param, grad, slot(dev_m_), slot(dev_v_)});
  }
  return updates;
}

Status ParameterStore::Push() {
  auto push = [&](const std::map<std::string, Tensor>& host,
                  std::map<std::string, Tensor*>& dev) -> Status {
    for (auto& [name, d] : dev) RETURN_IF_ERROR(backend_.CopyIn(host.at(name), *d));
    return Status::Ok();
  };
  RETURN_IF_ERROR(push(params_, dev_params_));
  RETURN_IF_ERROR(push(m_, dev_m_));
  RETURN_IF_ERROR(push(v_, dev_v_));
  stale_ = false;
  return Status::Ok();
}

Status ParameterStore::Pull() const {
  if (!stale_) return Status::Ok();
  auto pull = [&](const std::map<std::string, Tensor*>& dev,
                  std::map<std::string, Tensor>& host) -> Status {
    for (const auto& [name, d] : dev) RETURN_IF_ERROR(backend_.CopyOut(*d, host.at(name)));
    return Status::Ok();
  };
  RETURN_IF_ERROR(pull(dev_params_, params_));
  RETURN_IF_ERROR(pull(dev_m_, m_));
  RETURN_IF_ERROR(pull(dev_v_, v_));
  stale_ = false;
  return Status::Ok();
}

}  // namespace foundry
