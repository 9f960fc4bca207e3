// The one in-memory IR every pass reads and writes: a Graph of Nodes in topological order, and the
// Values they produce and consume, keyed by name (names are ONNX's identities, so import/export and
// the text form need no renumbering). Producer/consumer links are derived on demand (UseDef) rather
// than stored, so a pass can edit node lists freely and never leave a stale pointer behind.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace foundry {

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<const Tensor> t;

  static Attribute Int(int64_t v);
  static Attribute Float(float v);
  static Attribute String(std::string v);
  static Attribute Ints(std::vector<int64_t> v);
  static Attribute Floats(std::vector<float> v);
  static Attribute Strings(std::vector<std::string> v);
  static Attribute FromTensor(Tensor v);
  bool operator==(const Attribute& other) const;
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;                // "" = ai.onnx; "com.microsoft" for fused gradient ops
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  std::map<std::string, Attribute> attrs;
  // Module instance this node came from ("transformer.blocks.3.attn"; "" = the root module). The
  // class chain is Graph::ClassChain(scope).
  std::string scope;
  // Free-form marks kept through export as NodeProto doc string entries (recompute source, ...).
  std::map<std::string, std::string> marks;

  bool HasAttr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  float GetFloat(const std::string& key, float fallback) const;
  std::string GetString(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> GetInts(const std::string& key, std::vector<int64_t> fallback = {}) const;
  // "MatMul 'name' (scope transformer.blocks.0.attn)" for error messages.
  std::string Describe() const;
  // Number of non-empty inputs at the front (ONNX optional inputs are trailing or "").
  bool HasInput(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  bool HasOutput(size_t i) const { return i < outputs.size() && !outputs[i].empty(); }
};

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  // Dimensions; -1 = not yet known. `dim_params[i]` non-empty names a symbolic dimension ("batch").
  Shape shape;
  std::vector<std::string> dim_params;
  bool rank_known = false;  // false: nothing is known about the shape
  // Constant payload: initializers, folded constants. Null for activations and for parameters
  // declared by shape only (a --no-weights export: the runtime initialises them).
  std::shared_ptr<const Tensor> data;

  bool ShapeKnown() const;  // rank known and every dimension >= 0
  int64_t NumBytes() const;  // -1 when the shape is not known
  std::string TypeString() const;  // "f32[2,seq]" / "f32[?]"
};

// A module instance of the exported PyTorch model: its qualified class first, then its base
// classes (up to, not including, torch.nn.Module) when the export said so.
struct Module {
  std::vector<std::string> classes;
};

class Graph {
 public:
  std::string name = "graph";
  int64_t opset = 17;
  int64_t ir_version = 8;
  std::vector<Node> nodes;                 // topological order
  std::vector<std::string> inputs;         // run-time data inputs (input_ids, labels)
  std::vector<std::string> outputs;
  std::vector<std::string> initializers;   // weights and buffers, in import order
  std::vector<std::string> parameters;     // the trainable subset of initializers
  std::map<std::string, Module> modules;   // instance path -> classes ("" = root)
  std::map<std::string, std::string> metadata;  // model-level metadata_props

  Value* FindValue(const std::string& name);
  const Value* FindValue(const std::string& name) const;
  // The value, created empty if absent.
  Value& GetOrAddValue(const std::string& name);
  void EraseValue(const std::string& name) { values_.erase(name); }
  const std::map<std::string, Value>& values() const { return values_; }

  // A name not used by any value or node, built from `base` ("x" -> "x", "x_1", "x_2", ...).
  std::string UniqueValueName(const std::string& base);
  std::string UniqueNodeName(const std::string& base);

  bool IsParameter(const std::string& value) const;
  bool IsInitializer(const std::string& value) const;
  // "MPTForCausalLM > MPTModel > MPTBlock > GroupedQueryAttention": the bare class of each module
  // on the path from the root to `scope` that the module table knows.
  std::vector<std::string> ClassChain(const std::string& scope) const;
  // Drops values no node, input, output or initializer mentions.
  void PruneUnusedValues();

 private:
  std::map<std::string, Value> values_;
  std::unordered_map<std::string, int> node_name_counter_;
};

// Who produces and who consumes each value, for one snapshot of `graph.nodes`.
struct UseDef {
  std::unordered_map<std::string, int> producer;                 // value -> node index
  std::unordered_map<std::string, std::vector<int>> consumers;   // value -> node indices
  int Producer(const std::string& v) const;
  const std::vector<int>& Consumers(const std::string& v) const;
};
UseDef BuildUseDef(const Graph& graph);

// "llmfoundry.models.layers.attention.GroupedQueryAttention" -> "GroupedQueryAttention".
std::string BareClassName(const std::string& qualified);

// Bytes of a value with a known type; 0 when its shape is not known.
int64_t ValueBytes(const Graph& graph, const std::string& value);

}  // namespace foundry
