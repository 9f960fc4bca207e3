#include "compiler/model_files.h"

#include <onnx/onnx_pb.h>

#include <limits>
#include <optional>
#include <set>

#include "base/file_util.h"
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
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(model_path));
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
  std::set<std::string> initializers;
  for (const auto& init : m.graph().initializer()) initializers.insert(init.name());
  for (const auto& in : m.graph().input()) {
    if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) continue;
    if (initializers.count(in.name())) continue;  // a weight listed as an input (IR < 4 style)
    std::vector<std::string> axes, specialised;
    std::vector<int64_t>& sizes = out.input_shapes[in.name()];
    bool any = false, any_specialised = false;
    for (const auto& d : in.type().tensor_type().shape().dim()) {
      const std::optional<int64_t> decimal = onnx_util::DecimalDimParam(d.dim_param());
      sizes.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value()
                      : decimal                               ? *decimal
                                                              : -1);
      const bool symbol = d.has_dim_param() && !d.has_dim_value() && !decimal;
      axes.push_back(symbol ? d.dim_param() : "");
      any |= !axes.back().empty();
      specialised.push_back(decimal && !d.has_dim_value() ? d.dim_param() : "");
      any_specialised |= !specialised.back().empty();
    }
    if (any) out.input_dims[in.name()] = std::move(axes);
    if (any_specialised) out.input_specialised[in.name()] = std::move(specialised);
  }
  return out;
}

namespace {

// The decimal dim_param torch wrote for axis `axis` of `input` (a size it specialised); "" else.
std::string SpecialisedNameOf(const ModelFiles& files, const std::string& input, size_t axis) {
  auto it = files.input_specialised.find(input);
  return it == files.input_specialised.end() ? "" : it->second[axis];
}

// The name the model gives axis `axis` of `input`; "" for a fixed or unnamed axis.
std::string AxisNameOf(const ModelFiles& files, const std::string& input, size_t axis) {
  auto it = files.input_dims.find(input);
  return it == files.input_dims.end() ? "" : it->second[axis];
}

// "input_ids i64[batch,seq]" without the element type: "input_ids [batch, seq]".
std::string AxesOf(const ModelFiles& files, const std::string& input) {
  const std::vector<int64_t>& sizes = files.input_shapes.at(input);
  std::string out = input + " [";
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string name = AxisNameOf(files, input, i);
    out += (i ? ", " : "") + (!name.empty()   ? name
                              : sizes[i] >= 0 ? std::to_string(sizes[i])
                                              : std::string("?"));
  }
  return out + "]";
}

std::string InputList(const ModelFiles& files) {
  std::string out;
  for (const auto& [name, sizes] : files.input_shapes)
    out += (out.empty() ? "" : ", ") + AxesOf(files, name);
  return out.empty() ? "none with a shape" : out;
}

// `input`'s sizes per axis, or, for `option`, the error naming the inputs there are.
StatusOr<const std::vector<int64_t>*> ShapeOf(const ModelFiles& files, const std::string& input,
                                              const std::string& option) {
  auto it = files.input_shapes.find(input);
  if (it == files.input_shapes.end())
    return Error(option + ": the model has no input '" + input +
                 "' with a shape (inputs: " + InputList(files) + ")");
  return &it->second;
}

}  // namespace

StatusOr<std::map<std::string, int64_t>> ResolveInputDims(
    const ModelFiles& files, const std::map<std::string, int64_t>& dims,
    const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::set<std::string> names;
  for (const auto& [input, axes] : files.input_dims)
    for (const auto& a : axes)
      if (!a.empty()) names.insert(a);
  std::map<std::string, int64_t> out;
  auto bind = [&](const std::string& name, int64_t size, const std::string& option) -> Status {
    auto [it, inserted] = out.emplace(name, size);
    if (!inserted && it->second != size)
      return Error(option + ": dimension '" + name + "' is already bound to " +
                   std::to_string(it->second));
    return Status::Ok();
  };
  // The axis `axis` of `input`: its name, or why there is none to bind.
  auto axis_name = [&](const std::string& input, int64_t axis,
                       const std::string& option) -> StatusOr<std::string> {
    ASSIGN_OR_RETURN(const std::vector<int64_t>* sizes, ShapeOf(files, input, option));
    if (axis < 0 || axis >= static_cast<int64_t>(sizes->size()))
      return Error(option + ": input " + AxesOf(files, input) + " has no axis " +
                   std::to_string(axis));
    std::string name = AxisNameOf(files, input, static_cast<size_t>(axis));
    if (name.empty()) name = SpecialisedNameOf(files, input, static_cast<size_t>(axis));
    if (name.empty())
      return Error(option + ": axis " + std::to_string(axis) + " of input " + AxesOf(files, input) +
                   " is not symbolic; its size is the model's");
    return name;
  };
  for (const auto& [key, size] : dims) {
    const std::string option = "--dim " + key + "=" + std::to_string(size);
    const size_t dot = key.rfind('.');
    const bool positional = !names.count(key) && dot != std::string::npos && dot + 1 < key.size() &&
                            key.find_first_not_of("0123456789", dot + 1) == std::string::npos &&
                            key.size() - dot - 1 <= 9;
    if (!positional) {
      RETURN_IF_ERROR(bind(key, size, option));
      continue;
    }
    ASSIGN_OR_RETURN(std::string name,
                     axis_name(key.substr(0, dot), std::stoll(key.substr(dot + 1)), option));
    RETURN_IF_ERROR(bind(name, size, option));
  }
  for (const auto& [input, shape] : shapes) {
    std::string text;
    for (int64_t d : shape) text += (text.empty() ? "" : "x") + std::to_string(d);
    const std::string option = "--input-shape " + input + "=" + text;
    ASSIGN_OR_RETURN(const std::vector<int64_t>* found, ShapeOf(files, input, option));
    const std::vector<int64_t>& sizes = *found;
    if (sizes.size() != shape.size())
      return Error(option + ": input " + AxesOf(files, input) + " has " +
                   std::to_string(sizes.size()) + " axes, not " + std::to_string(shape.size()));
    for (size_t i = 0; i < shape.size(); ++i) {
      const std::string name = AxisNameOf(files, input, i);
      const std::string specialised = SpecialisedNameOf(files, input, i);
      if (!name.empty()) {
        RETURN_IF_ERROR(bind(name, shape[i], option));
      } else if (!specialised.empty()) {
        if (sizes[i] != shape[i]) RETURN_IF_ERROR(bind(specialised, shape[i], option));
      } else if (sizes[i] >= 0 && sizes[i] != shape[i]) {
        return Error(option + ": axis " + std::to_string(i) + " of input " + AxesOf(files, input) +
                     " is fixed at " + std::to_string(sizes[i]));
      }
    }
  }
  return out;
}

}  // namespace foundry
