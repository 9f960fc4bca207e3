// Trainer::Save and Trainer::Resume: the --save directory (runtime/train_state.h) written and read.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/tensor_proto.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/messages.h"
#include "runtime/safetensors.h"
#include "runtime/trainer.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace fs = std::filesystem;

namespace {

// `path` lies in `dir` (or is `dir`), comparing canonical paths so links and ".." do not hide it.
bool IsInside(const std::string& path, const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  fs::path d = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  auto [di, pi] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return di == d.end() || (std::next(di) == d.end() && di->empty());
}

}  // namespace

// ---- save / resume -------------------------------------------------------------------------

namespace {

// The ranks a save was written by ("world_size" in its state.json; 1 when absent).
int64_t SavedWorldSize(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "state.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("world_size") || !j["world_size"].is_number_integer()) return 1;
  const int64_t n = j["world_size"].get<int64_t>();
  return n >= 1 ? n : 1;
}

std::string NormalDir(const std::string& dir_arg) {
  std::string dir = fs::path(dir_arg).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

Status Trainer::CheckNotAnInput(const std::string& path, const std::string& option,
                                const std::string& advice) const {
  const std::optional<FileId> id = GetFileId(path);
  if (!id) return Status::Ok();
  for (const auto& input : input_files_)
    if (GetFileId(input) == id)
      return Error(option + ": writing '" + path + "' would overwrite '" + input +
                   "', an input of this run; " + advice);
  return Status::Ok();
}

Status Trainer::CheckSaveTarget(const std::string& dir_arg) const {
  const std::string dir = NormalDir(dir_arg);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      return Error("--save " + dir_arg + ": '" + dir +
                   "' exists and is not a directory; choose a new directory");
    if (!fs::is_empty(dir, ec) && !fs::exists(fs::path(dir) / "state.json"))
      return Error("--save " + dir_arg + ": '" + dir +
                   "' exists and is not a foundry-run save (no state.json); choose another "
                   "directory");
    if (!resume_dir_.empty() && GetFileId(dir) == GetFileId(resume_dir_))
      return Error("--save " + dir_arg +
                   ": it is the --resume directory, whose files this run reads; save to "
                   "another directory");
  }
  for (const auto& input : input_files_)
    if (GetFileId(input) && IsInside(input, dir))
      return Error("--save " + dir_arg + ": '" + dir + "' holds '" + input +
                   "', an input of this run; save to another directory");
  return Status::Ok();
}

Status Trainer::Save(const std::string& dir_arg) const {
  if (failed_) return Error("--save " + dir_arg + ": a step failed; nothing to save");
  RETURN_IF_ERROR(CheckSaveTarget(dir_arg));
  OutputSet outputs;
  RETURN_IF_ERROR(outputs.AddFolder(dir_arg, "--save"));
  ASSIGN_OR_RETURN(std::string folder, outputs.Stage(dir_arg));
  RETURN_IF_ERROR(SaveInto(folder));
  RETURN_IF_ERROR(outputs.Commit());
  // Data parallel: the other ranks (JoinSave) go on once the save is in place.
  return world_ > 1 ? host_comm_->Barrier() : Status::Ok();
}

Status Trainer::SaveInto(const std::string& folder) const {
  if (failed_) return Error("--save: a step failed; nothing to save");
  std::error_code ec;
  if (!fs::create_directories(fs::path(folder) / "optimizer", ec))
    return Error("--save: cannot create '" + folder + "/optimizer': " + ec.message());
  RETURN_IF_ERROR(WriteSave(folder));
  // Last: a save in place always has its manifest (runtime/checkpoint_manifest.h).
  return WriteCheckpointManifest(folder).Prepend("--save: ");
}

// model.onnx (an unsharded run's: a sharded training graph holds each parameter as a shard
// ([c]), so it cannot carry the full weights; Resume then reads model.safetensors) and
// model.safetensors: the same parameters under their PyTorch names, for PyTorch users
// (runtime/safetensors.h; those without one keep their ONNX name and are listed).
Status Trainer::WriteWeights(const std::string& tmp,
                             const std::map<std::string, Tensor>& params) const {
  if (!sharded_) {
    Graph g = plan_.graph;
    // Views of the host parameters, not copies: a periodic checkpoint in the step loop would
    // otherwise hold a second copy of every parameter while it writes (outside the plan).
    for (const auto& name : plan_.plan.parameters) {
      const Tensor& p = store_->host_params().at(name);
      g.FindValue(name)->data = std::make_shared<const Tensor>(
          Tensor::View(p.dtype(), p.shape(), const_cast<void*>(p.raw())));
    }
    RETURN_IF_ERROR(ExportOnnx(g, (fs::path(tmp) / "model.onnx").string()));
  }
  const TorchNames names = MapTorchNames(plan_.graph, plan_.plan.parameters);
  std::vector<std::pair<std::string, const Tensor*>> weights;
  for (const auto& name : plan_.plan.parameters)
    weights.emplace_back(names.torch_name.at(name), &params.at(name));
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"foundry.step", std::to_string(step_)}};
  if (!names.unmapped.empty())
    meta["foundry.unmapped"] = nlohmann::json(names.unmapped)
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return WriteSafetensors((fs::path(tmp) / "model.safetensors").string(), weights, meta);
}

// state.json (runtime/train_state.h): the step, the options a resumed run continues with, and
// where the data stands.
StatusOr<std::string> Trainer::StateJson() const {
  std::error_code ec;
  const OptimizerOptions& o = options_.optimizer;
  nlohmann::ordered_json j;
  j["format"] = "foundry-train-state";
  j["version"] = 1;
  j["plan"] = fs::absolute(plan_.plan_path, ec).lexically_normal().string();
  j["step"] = step_;
  j["optimizer"] = {{"kind", std::string(OptimizerName(o.kind))},
                    {"lr", o.lr},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay},
                    {"momentum", o.momentum}};
  j["seed"] = options_.seed;
  j["init_seed"] = options_.init_seed;
  std::string data_path;
  if (data_.file) data_path = fs::absolute(data_.file->path(), ec).lexically_normal().string();
  if (data_.mds) data_path = fs::absolute(data_.mds->dir(), ec).lexically_normal().string();
  // Feed files by absolute path, so a resume from another directory finds them.
  std::vector<std::string> feeds;
  for (const auto& spec : options_.feeds) {
    size_t eq = spec.find('=');
    feeds.push_back(spec.substr(0, eq + 1) +
                    fs::absolute(spec.substr(eq + 1), ec).lexically_normal().string());
  }
  j["data"] = {{"feeds", feeds},
               {"path", data_path},
               {"dtype", std::string(TokenDTypeName(options_.data_dtype))},
               {"position", data_position_},
               {"labels", std::string(LabelRuleName(options_.labels))}};
  if (data_.mds) {  // how the folder is read: a resume reads it in the same order
    const MdsReadOptions& m = data_.mds_options;
    j["data"]["mds"] = {{"shuffle", m.shuffle},
                        {"shuffle_seed", m.shuffle_seed},
                        {"shuffle_block", m.shuffle_block},
                        {"drop_last", m.drop_last},
                        {"token_encoding_type", m.token_encoding_type},
                        {"samples", data_.mds->num_samples()}};
  }
  j["init_from"] = options_.init_from.empty()
                       ? std::string()
                       : fs::absolute(options_.init_from, ec).lexically_normal().string();
  const ScheduleOptions& sc = options_.schedule;
  j["schedule"] = {{"name", std::string(ScheduleName(sc.kind))},
                   {"t_warmup", sc.t_warmup},
                   {"t_max", sc.t_max},
                   {"alpha_i", sc.alpha_i},
                   {"alpha_f", sc.alpha_f}};
  j["max_steps"] = options_.total_steps;  // as given: 0 = the last step of each run
  j["clip_norm"] = options_.clip_norm;
  if (accumulation_ != 1) j["accumulation_steps"] = accumulation_;
  // Data parallel: the ranks that ran it (a resume on another N checks N * accumulation_steps).
  if (world_ != 1) {
    j["world_size"] = world_;
    j["sharding"] = plan_.plan.sharding->strategy;
  }
  try {
    return j.dump(2) + "\n";
  } catch (const nlohmann::json::exception&) {
    return Error("--save: a --feed or --data path is not valid UTF-8; rename the file");
  }
}

Status Trainer::WriteSave(const std::string& tmp) const {
  RETURN_IF_ERROR(store_->Pull());
  // Sharded: every rank's shards gathered into full tensors (each rank calls this or JoinSave).
  std::optional<SavedState> gathered;
  if (sharded_) {
    ASSIGN_OR_RETURN(gathered, GatherState());
  }
  const std::map<std::string, Tensor>& params = gathered ? gathered->params : store_->host_params();
  const std::map<std::string, Tensor>& slots_m = gathered ? gathered->m : store_->host_m();
  const std::map<std::string, Tensor>& slots_v = gathered ? gathered->v : store_->host_v();
  RETURN_IF_ERROR(WriteWeights(tmp, params));
  auto write_slots = [&](const std::map<std::string, Tensor>& slots,
                         const std::string& suffix) -> Status {
    for (const auto& [name, t] : slots)
      RETURN_IF_ERROR(WriteTensorFile(
          (fs::path(tmp) / "optimizer" / (FileNameForValue(name) + suffix)).string(), t,
          name + suffix.substr(0, 2)));
    return Status::Ok();
  };
  RETURN_IF_ERROR(write_slots(slots_m, ".m.pb"));
  RETURN_IF_ERROR(write_slots(slots_v, ".v.pb"));
  ASSIGN_OR_RETURN(std::string json, StateJson());
  return WriteFileAtomic((fs::path(tmp) / "state.json").string(), json);
}

// The saved run can go on here: the same optimizer, and the same microbatches per step.
Status Trainer::CheckResumable(const std::string& dir, const TrainState& s) const {
  const OptimizerOptions& o = options_.optimizer;
  if (s.optimizer.kind != o.kind)
    return Error("--resume " + dir + ": the saved run used --optimizer " +
                 std::string(OptimizerName(s.optimizer.kind)) + ", this one " +
                 std::string(OptimizerName(o.kind)));
  // A save is the same for any world size: what must match is the microbatches per step over
  // all ranks (N * K), which fixes the windows each step reads.
  const int64_t saved_world = SavedWorldSize(dir);
  if (s.accumulation_steps * saved_world == accumulation_ * world_) return Status::Ok();
  if (saved_world == 1 && world_ == 1)
    return Error("--resume " + dir + ": the saved run accumulated " +
                 std::to_string(s.accumulation_steps) + " microbatches per step, this one " +
                 std::to_string(accumulation_) + "; resume it with --grad-accum " +
                 std::to_string(s.accumulation_steps) + " (and its plan)");
  return Error("--resume " + dir + ": the saved run's steps were " +
               std::to_string(s.accumulation_steps * saved_world) + " microbatches (" +
               std::to_string(saved_world) + " ranks x --grad-accum " +
               std::to_string(s.accumulation_steps) + "), this one's " +
               std::to_string(accumulation_ * world_) + " (" + std::to_string(world_) + " x " +
               std::to_string(accumulation_) +
               "); resume it with a plan and --grad-accum whose product with the ranks is " +
               std::to_string(s.accumulation_steps * saved_world));
}

// The full parameters: model.onnx's (a save of an unsharded run), else model.safetensors's (a
// sharded run's save has no model.onnx).
StatusOr<std::map<std::string, Tensor>> Trainer::ReadSavedWeights(const std::string& dir) const {
  std::map<std::string, Tensor> full;
  const std::string model = (fs::path(dir) / "model.onnx").string();
  std::error_code exists_ec;
  if (fs::exists(model, exists_ec)) {
    ImportOptions io;
    io.load_weights = true;
    auto saved = ImportOnnx(model, io);
    if (!saved.ok()) return saved.status().Prepend("--resume " + dir + ": ");
    for (const auto& name : plan_.plan.parameters) {
      const Value* sv = saved->FindValue(name);
      if (!sv || !sv->data)
        return Error("--resume " + dir + ": '" + model + "' has no values for parameter '" + name +
                     "'; was it saved from another model?");
      full[name] = *sv->data;
    }
    return full;
  }
  const std::string weights = (fs::path(dir) / "model.safetensors").string();
  auto file = ReadSafetensors(weights);
  if (!file.ok()) return file.status().Prepend("--resume " + dir + ": ");
  const TorchNames names = MapTorchNames(plan_.graph, plan_.plan.parameters);
  for (const auto& name : plan_.plan.parameters) {
    auto it = file->tensors.find(names.torch_name.at(name));
    if (it == file->tensors.end())
      return Error("--resume " + dir + ": '" + weights + "' has no values for parameter '" +
                   names.torch_name.at(name) + "'; was it saved from another model?");
    full[name] = std::move(it->second);
  }
  return full;
}

Status Trainer::Resume(const std::string& dir) {
  ASSIGN_OR_RETURN(TrainState s, ReadVerifiedTrainState(dir));
  RETURN_IF_ERROR(CheckResumable(dir, s));
  auto read = ReadSavedWeights(dir);
  if (!read.ok()) return read.status();
  const std::map<std::string, Tensor>& full = *read;
  const OptimizerOptions& o = options_.optimizer;
  std::map<std::string, Tensor> params, m, v;
  for (const auto& name : plan_.plan.parameters) {
    const Tensor& cur = store_->host_params().at(name);
    const ShardedParameter* sp = ShardOf(name);
    const Shape& shape = sp ? sp->shape : cur.shape();  // what the save holds: full shapes
    const Tensor& saved = full.at(name);
    if (saved.dtype() != cur.dtype() || saved.shape() != shape)
      return Error("--resume " + dir + ": parameter '" + name + "' is " +
                   TypeOf(saved.dtype(), saved.shape()) + " in the save but " +
                   TypeOf(cur.dtype(), shape) + " in the plan");
    params[name] = sp ? SliceShard(saved, *sp) : saved;
    auto load_slot = [&](const std::string& suffix, std::map<std::string, Tensor>& into) -> Status {
      const std::string path =
          (fs::path(dir) / "optimizer" / (FileNameForValue(name) + suffix)).string();
      auto t = ReadTensorFile(path);
      if (!t.ok()) return t.status().Prepend("--resume " + dir + ": optimizer state: ");
      if (t->dtype() != DType::kFloat32 || t->shape() != shape)
        return Error("--resume " + dir + ": '" + path + "' is " + TypeOf(t->dtype(), t->shape()) +
                     ", expected " + TypeOf(DType::kFloat32, shape));
      into[name] = sp ? SliceShard(*t, *sp) : std::move(t).value();
      return Status::Ok();
    };
    if (s.step == 0) continue;  // no update yet: slots are created by the first step
    if (IsAdam(o.kind)) {
      RETURN_IF_ERROR(load_slot(".m.pb", m));
      RETURN_IF_ERROR(load_slot(".v.pb", v));
    } else if (o.momentum != 0) {
      RETURN_IF_ERROR(load_slot(".m.pb", m));
    }
  }
  // Room for one more step's windows: (position + batch) * (seq + 1) must fit int64.
  const int64_t batch = accumulation_ * world_ * data_.batch, seq = data_.seq;
  if (batch > 0 && s.data_position > INT64_MAX / (seq + 1) - batch)
    return Error("--resume " + dir + ": data position " + std::to_string(s.data_position) +
                 " is out of range for batches of " + std::to_string(batch) + " x " +
                 std::to_string(seq + 1) + " tokens");
  // An MDS folder: the position counts samples of the order it was read in.
  if (data_.mds && s.mds_samples > 0 && s.mds_samples != data_.mds->num_samples())
    return Error("--resume " + dir + ": the save read " + std::to_string(s.mds_samples) +
                 " samples of its MDS data, but --data " + data_.mds->dir() + " has " +
                 std::to_string(data_.mds->num_samples()) +
                 "; its position would name other samples: resume with the same data");
  // Into the trainer's own tensors: the executor reads the parameters where they are.
  auto copy_into = [](std::map<std::string, Tensor>& from, std::map<std::string, Tensor>& to) {
    for (auto& [name, t] : from) std::memcpy(to.at(name).raw(), t.raw(), t.nbytes());
  };
  copy_into(params, store_->host_params());
  copy_into(m, store_->host_m());
  copy_into(v, store_->host_v());
  RETURN_IF_ERROR(store_->Push());  // the host copies are now the state: to the backend
  step_ = s.step;
  data_position_ = s.data_position;
  resume_dir_ = dir;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) input_files_.push_back(e.path().string());
  return Status::Ok();
}

}  // namespace foundry
