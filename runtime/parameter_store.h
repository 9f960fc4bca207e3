// What the optimizer trains: every parameter and its optimizer slots (AdamW m and v, SGD's
// momentum buffer m), as host tensors and as tensors in the backend's memory.
//
// On a backend whose memory is host memory (the CPU) the two are the same tensors: the executor
// reads the host tensors in place and the optimizer updates them there, and Push / Pull copy
// nothing. On a device the backend copies (each its own region, class parameter or
// optimizer_state, as the host tensors are) are what the steps read and write; the host copies
// are brought up to date on demand: Pull copies back only when a step changed the backend copies
// since (the stale flag, set by MarkStale).
//
// Every tensor stays where it is for the store's life: the executor holds views of the backend
// parameters, and a resume copies into the host tensors, then pushes.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "runtime/backend.h"

namespace foundry {

class ParameterStore {
 public:
  // Takes the parameters (`names` in the plan's order, every one in `params`, f32) and creates
  // their optimizer slots, zero (class optimizer_state): m for AdamW and for SGD with momentum, v
  // for AdamW. On a device, allocates the backend copies and pushes.
  static StatusOr<std::unique_ptr<ParameterStore>> Create(Backend& backend,
                                                          std::vector<std::string> names,
                                                          std::map<std::string, Tensor> params,
                                                          const OptimizerOptions& optimizer);

  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  const std::vector<std::string>& names() const { return names_; }

  // The parameters in backend memory, for the executor to bind.
  std::map<std::string, Tensor*> BackendParameters();
  // The optimizer's operands, one per parameter in names() order; gradients[i] is the gradient of
  // names()[i], in backend memory. An error names a gradient whose type is not its parameter's.
  StatusOr<std::vector<ParameterUpdate>> Updates(const std::vector<const Tensor*>& gradients,
                                                 const std::vector<std::string>& gradient_names);

  // Host -> backend, after the host copies were written (Create, a resume).
  Status Push();
  // Backend -> host when a step changed the backend copies since the last push or pull.
  Status Pull() const;
  // The backend copies are about to change (a step's update): the host copies are stale.
  void MarkStale() { stale_ = !backend_.host_memory(); }

  // The host copies: current after Pull. Writable for a resume (then Push).
  std::map<std::string, Tensor>& host_params() { return params_; }
  std::map<std::string, Tensor>& host_m() { return m_; }
  std::map<std::string, Tensor>& host_v() { return v_; }
  const std::map<std::string, Tensor>& host_params() const { return params_; }
  const std::map<std::string, Tensor>& host_m() const { return m_; }
  const std::map<std::string, Tensor>& host_v() const { return v_; }

 private:
  explicit ParameterStore(Backend& backend) : backend_(backend) {}
  // The backend copies of `host` (views of new regions of class `c`), or the host tensors
  // themselves on a host-memory backend.
  Status Mirror(std::map<std::string, Tensor>& host, std::map<std::string, Tensor*>& backend,
                MemoryClass c, const std::string& what);

  Backend& backend_;
  std::vector<std::string> names_;
  mutable std::map<std::string, Tensor> params_, m_, v_;  // the host tensors
  // The backend's tensors: pointers to the host tensors on a host-memory backend, else to the
  // views in device_views_ (of regions_; a deque, so they never move).
  std::map<std::string, Tensor*> dev_params_, dev_m_, dev_v_;
  std::deque<Tensor> device_views_;
  std::vector<Region> regions_;
  mutable bool stale_ = false;
};

}  // namespace foundry
