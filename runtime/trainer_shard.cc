// The Trainer's data-parallel parts (runtime/trainer.h, "Data parallel"):
// the world checks, the shards of the parameters, the exchanges of a step (loss-token counts,
// loss terms and finite flags, the gradient norm's sums) and the gathers of a save.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "compiler/sharding.h"
#include "kernels/cpu/grad_norm.h"
#include "runtime/messages.h"
#include "runtime/mpi_communicator.h"
#include "runtime/trainer.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace fs = std::filesystem;

namespace {

int64_t NumelOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

// The plan's world against the run's: a plan for N ranks needs a communicator of N; a plan for
// one process refuses a world of several (each rank would train alone and write the same files).
Status Trainer::ResolveWorld() {
  comm_ = options_.comm;
  const std::optional<ShardingPlan>& sharding = plan_.plan.sharding;
  const int64_t planned = sharding ? sharding->world_size : 1;
  const int running = comm_ ? comm_->size() : 1;
  const std::string n = std::to_string(planned);
  if (planned < 1)
    return Error("'" + plan_.plan_path + "' is a damaged foundry plan (world_size " + n +
                 "); recompile it with foundry-compile");
  if (planned == 1 && running > 1)
    return Error("'" + plan_.plan_path + "' is a plan for one process and this run has " +
                 std::to_string(running) + " ranks; compile it with foundry-compile --world-size " +
                 std::to_string(running) + " --sharding FULL_SHARD (or run it without mpirun)");
  if (planned > 1) {
    const std::string& s = sharding->strategy;
    const std::optional<ShardingStrategy> strategy = ParseSharding(s);
    if (strategy == ShardingStrategy::kHybridShard)
      return Error(
          "'" + plan_.plan_path +
          "' is sharded HYBRID_SHARD, which foundry plans but does not run yet; compile "
          "it with --sharding " +
          ShardingNames(" or ", {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                 ShardingStrategy::kNoShard}));
    if (!strategy)
      return Error("'" + plan_.plan_path + "' has an unknown sharding strategy '" + s +
                   "'; recompile it with foundry-compile");
    if (!comm_ && !BuiltWithMpi())
      return Error("this plan is for " + n +
                   " ranks and foundry was built without MPI; install it (scripts/setup.sh), "
                   "rebuild, and run it with mpirun -n " +
                   n + " foundry-run ...");
    if (running != planned)
      return Error("this plan is for " + n + " ranks; run it with mpirun -n " + n +
                   " foundry-run ...");
    // The trainer's own exchanges (token counts, loss terms, norms, saves) are of host memory.
    host_comm_ = options_.host_comm ? options_.host_comm : comm_;
    if (host_comm_->name() != "mpi")
      return Error("the trainer exchanges token counts, losses and saves in host memory, and the " +
                   std::string(comm_->name()) +
                   " communicator moves device memory; give the trainer a host communicator "
                   "(TrainerOptions::host_comm, MPI) of the same ranks");
    if (host_comm_->size() != comm_->size() || host_comm_->rank() != comm_->rank())
      return Error("the host communicator is rank " + std::to_string(host_comm_->rank()) + " of " +
                   std::to_string(host_comm_->size()) + " and the " + std::string(comm_->name()) +
                   " one rank " + std::to_string(comm_->rank()) + " of " +
                   std::to_string(comm_->size()) + "; give both the same ranks");
    if (comm_->name() == "mpi" && !backend_->host_memory())
      return Error("the MPI communicator moves host memory and the " +
                   std::string(backend_->name()) +
                   " backend's is the device's; run it with "
                   "--device cpu");
    sharded_ = *strategy != ShardingStrategy::kNoShard;
    for (const auto& name : plan_.plan.parameters)
      if (sharded_ && !sharding->parameters.count(name))
        return Error("'" + plan_.plan_path + "' is a damaged foundry plan (" + s +
                     " but parameter '" + name +
                     "' has no shard); recompile it with foundry-compile");
    if (sharded_ && !sharding->init_file.empty()) {
      fs::path init = sharding->init_file;
      if (init.is_relative()) init = fs::path(plan_.plan_path).parent_path() / init;
      auto file = ReadSafetensors(init.string());
      if (!file.ok()) return file.status();
      init_file_ = std::move(file).value();
      input_files_.push_back(init.string());
    }
  }
  rank_ = comm_ ? comm_->rank() : 0;
  world_ = running;
  return Status::Ok();
}

const ShardedParameter* Trainer::ShardOf(const std::string& name) const {
  if (!sharded_) return nullptr;
  auto it = plan_.plan.sharding->parameters.find(name);
  return it == plan_.plan.sharding->parameters.end() ? nullptr : &it->second;
}

// The full initial value of a sharded parameter: the plan's init file, else drawn whole with the
// same seed on every rank (exactly the tensor an unsharded run starts from).
StatusOr<Tensor> Trainer::FullInitialValue(const std::string& name, const ShardedParameter& sp) {
  const int64_t numel = NumelOf(sp.shape);
  if (sp.shard != ShardElements(numel, world_))
    return Error("'" + plan_.plan_path + "' is a damaged foundry plan (parameter '" + name +
                 "' of " + std::to_string(numel) + " elements has shards of " +
                 std::to_string(sp.shard) + " on " + std::to_string(world_) +
                 " ranks); recompile it with foundry-compile");
  if (!init_file_) return InitParameter(name, sp.shape, options_.init_seed);
  auto it = init_file_->tensors.find(name);
  if (it == init_file_->tensors.end())
    return Error("the plan's initial values '" + plan_.plan.sharding->init_file + "' have no '" +
                 name + "'; recompile the plan with foundry-compile");
  if (it->second.dtype() != DType::kFloat32 || it->second.shape() != sp.shape)
    return Error("the plan's initial values '" + plan_.plan.sharding->init_file + "' hold '" +
                 name + "' as " + TypeOf(it->second.dtype(), it->second.shape()) + ", the plan " +
                 TypeOf(DType::kFloat32, sp.shape) + "; recompile the plan with foundry-compile");
  return std::move(it->second);
}

// Rank r's shard: flat(full)[r*c, (r+1)*c), zero past numel.
Tensor Trainer::SliceShard(const Tensor& full, const ShardedParameter& sp) const {
  Tensor shard(DType::kFloat32, {sp.shard});
  const int64_t begin = rank_ * sp.shard;
  const int64_t n = std::max<int64_t>(0, std::min(sp.shard, full.numel() - begin));
  if (n > 0)
    std::memcpy(shard.raw(), full.data<float>() + begin, static_cast<size_t>(n) * sizeof(float));
  return shard;
}

// Every rank's shard of `name` (a host tensor of c elements) gathered into the full tensor.
StatusOr<Tensor> Trainer::GatherFull(const std::string& name, const Tensor& shard) const {
  const ShardedParameter* sp = ShardOf(name);
  if (!sp) return shard;
  const int64_t c = sp->shard;
  ASSIGN_OR_RETURN(Tensor all, Tensor::Allocate(DType::kFloat32, {world_ * c}));
  RETURN_IF_ERROR(host_comm_->AllGather(shard.raw(), all.raw(), c * 4));
  ASSIGN_OR_RETURN(Tensor full, Tensor::Allocate(DType::kFloat32, sp->shape));
  std::memcpy(full.raw(), all.raw(), static_cast<size_t>(full.numel()) * sizeof(float));
  return full;
}

// This rank's K loss-token counts -> every rank's, in global microbatch order j = k*N + r.
Status Trainer::ExchangeCounts(std::vector<int64_t>& counts) const {
  const int64_t K = static_cast<int64_t>(counts.size());
  std::vector<int64_t> all(static_cast<size_t>(world_ * K));
  RETURN_IF_ERROR(host_comm_->AllGather(counts.data(), all.data(), K * 8));
  counts.assign(all.size(), 0);
  for (int64_t r = 0; r < world_; ++r)
    for (int64_t k = 0; k < K; ++k)
      counts[static_cast<size_t>(k * world_ + r)] = all[static_cast<size_t>(r * K + k)];
  return Status::Ok();
}

// This rank's K loss terms s_j * loss_j and its finite flag -> every rank's terms in j order, and
// whether every rank's losses and gradients are finite.
Status Trainer::ExchangeStepTerms(std::vector<float>& terms, bool& finite) const {
  const int64_t K = static_cast<int64_t>(terms.size());
  std::vector<float> mine(terms);
  mine.push_back(finite ? 1.0f : 0.0f);
  std::vector<float> all(static_cast<size_t>(world_ * (K + 1)));
  RETURN_IF_ERROR(host_comm_->AllGather(mine.data(), all.data(), (K + 1) * 4));
  terms.assign(static_cast<size_t>(world_ * K), 0.0f);
  finite = true;
  for (int64_t r = 0; r < world_; ++r) {
    for (int64_t k = 0; k < K; ++k)
      terms[static_cast<size_t>(k * world_ + r)] = all[static_cast<size_t>(r * (K + 1) + k)];
    finite = finite && all[static_cast<size_t>(r * (K + 1) + K)] == 1.0f;
  }
  return Status::Ok();
}

// The global norm of sharded gradients: each rank's per-tensor sums of squares (SumOfSquares,
// kernels/cpu/grad_norm.h) exchanged and added in rank order (a full gradient, the same on every
// rank, counts once), then the norm and clipping as Backend::ClipGradNorm forms them. The sums
// split each tensor at the shard boundaries, so the norm may differ from one process's by f32
// ulps (and the clipped gradients by as much, relative).
StatusOr<float> Trainer::ShardedGradNorm() {
  if (!backend_->host_memory())
    return Error(
        "the gradient norm of a sharded plan runs on the cpu backend only; drop "
        "--grad-norm and --clip-norm, or run it with --device cpu");
  const size_t P = clipped_gradients_.size();
  std::vector<double> mine(P);
  for (size_t i = 0; i < P; ++i)
    mine[i] = SumOfSquares(clipped_gradients_[i]->data<float>(), clipped_gradients_[i]->numel());
  std::vector<double> all(P * static_cast<size_t>(world_));
  RETURN_IF_ERROR(host_comm_->AllGather(mine.data(), all.data(), static_cast<int64_t>(P) * 8));
  std::vector<double> sums(P, 0.0);
  for (size_t i = 0; i < P; ++i) {
    if (!ShardOf(plan_.plan.parameters[i])) {
      sums[i] = mine[i];
      continue;
    }
    for (int64_t r = 0; r < world_; ++r) sums[i] += all[static_cast<size_t>(r) * P + i];
  }
  const ClipScalars c = ClipScalarsFromSums(sums, options_.clip_norm);
  if (options_.clip_norm > 0 && c.clip_coef != 1.0f)
    for (Tensor* g : clipped_gradients_) ScaleInPlace(g->data<float>(), g->numel(), c.clip_coef);
  return c.total_norm;
}

StatusOr<Trainer::SavedState> Trainer::GatherState() const {
  RETURN_IF_ERROR(store_->Pull());
  SavedState s;
  for (const auto& name : plan_.plan.parameters) {
    ASSIGN_OR_RETURN(s.params[name], GatherFull(name, store_->host_params().at(name)));
    if (auto it = store_->host_m().find(name); it != store_->host_m().end()) {
      ASSIGN_OR_RETURN(s.m[name], GatherFull(name, it->second));
    }
    if (auto it = store_->host_v().find(name); it != store_->host_v().end()) {
      ASSIGN_OR_RETURN(s.v[name], GatherFull(name, it->second));
    }
  }
  return s;
}

Status Trainer::JoinSave() const {
  if (world_ == 1) return Status::Ok();
  if (failed_) return Error("--save: a step failed; nothing to save");
  if (sharded_) RETURN_IF_ERROR(GatherState().status());
  return host_comm_->Barrier();
}

}  // namespace foundry
