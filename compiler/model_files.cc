#include "compiler/model_files.h"

#include <onnx/onnx_pb.h>

#include <limits>
#include <set>

#include "compiler/onnx_proto_util.h"

namespace foundry {

namespace {

struct Collector {
  std::string dir;
  std::set<std::string> seen;
  std::vector<std::string> files;

  void Tensor(const onnx::TensorProto& t) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
    for (const auto& kv : t.external_data())
      if (kv.key() == "location" && !kv.value().empty()) {
        std::string file = onnx_util::JoinPath(dir, kv.value());
        if (seen.insert(file).second) files.push_back(file);
      }
  }
  void Node(const onnx::NodeProto& n) {
    for (const auto& a : n.attribute()) {
      if (a.has_t()) Tensor(a.t());
      for (const auto& t : a.tensors()) Tensor(t);
      if (a.has_g()) Graph(a.g());
      for (const auto& g : a.graphs()) Graph(g);
    }
  }
  void Graph(const onnx::GraphProto& g) {
    for (const auto& t : g.initializer()) Tensor(t);
    for (const auto& n : g.node()) Node(n);
  }
};

}  // namespace

StatusOr<ModelFiles> InspectModelFile(const std::string& model_path) {
  ASSIGN_OR_RETURN(std::string bytes, onnx_util::ReadFile(model_path));
  onnx::ModelProto m;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !m.ParseFromString(bytes))
    return Error("'" + model_path + "' is not an ONNX model (protobuf parse failed)");
  Collector c;
  c.dir = onnx_util::DirName(model_path);
  c.Graph(m.graph());
  for (const auto& f : m.functions())
    for (const auto& n : f.node()) c.Node(n);
  ModelFiles out;
  out.external_data = std::move(c.files);
  for (const auto& in : m.graph().input()) {
    if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) continue;
    std::vector<std::string> axes;
    bool any = false;
    for (const auto& d : in.type().tensor_type().shape().dim()) {
      const bool symbol = d.has_dim_param() && !onnx_util::DecimalDimParam(d.dim_param());
      axes.push_back(symbol ? d.dim_param() : "");
      any |= !axes.back().empty();
    }
    if (any) out.input_dims[in.name()] = std::move(axes);
  }
  return out;
}

}  // namespace foundry
