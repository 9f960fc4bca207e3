// The module tree of an imported model, as `foundry-compile --list-modules` prints it and as
// target selection (--ckpt) matches against it: per module instance its classes, the --ckpt names
// that select it (llm-foundry's activation_checkpointing_target registry keys, DESIGN §3), the
// forward nodes it owns and the parameter bytes it holds, and the layer index of the block it is
// in.
//
// Blocks are the repeated instances of a module list, found from the paths alone (a stock
// torch.onnx.export names no class): the numbered siblings `P.0 ... P.(N-1)` of one list `P` are
// blocks when
//   - P's last segment is `blocks`, `layers` or `h` (MPT, Llama, GPT-2; any N), or
//   - there are at least two of them, numbered 0 to N-1 without a gap, each with submodules, all
//     with the same child names (`bert.encoder.layer.N`, `gpt_neox.layers.N`, any custom name).
// The outermost list wins: a list inside a block (MoE experts) is not a second level of blocks.
// The leaf test keeps nn.Sequential out (`mlp.0`, `mlp.1` are a Linear and an activation: no
// submodules of their own). Every block gets the --ckpt key `block`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir.h"

namespace foundry {

struct ModuleInfo {
  std::string path;                  // "transformer.blocks.0.attn"; "" = the root module
  std::string qualified_class;       // classes[0], or "" when the export named no class
  std::vector<std::string> classes;  // qualified class, then its bases (when known)
  // Names `--ckpt` accepts for this module, lowercase: registry keys first (`mptblock`,
  // `grouped_query_attention`, ...), then the bare names of its class and bases
  // (`multiheadattention`).
  std::vector<std::string> registry_keys;
  int node_count = 0;       // nodes whose scope is this module or inside it
  int64_t param_bytes = 0;  // bytes of parameters named `<path>.*` (all of them for the root)
  int depth = 0;            // number of listed ancestors (indentation in the table)
  // N of the enclosing block `P.N` (the block itself included), -1 outside blocks.
  int64_t block_index = -1;
  bool is_block = false;   // the path is a block itself (`transformer.blocks.3`)
  std::string block_list;  // P of the enclosing block (`transformer.blocks`), "" outside blocks
};

// The --ckpt key every block answers to, whatever its class (or none).
inline constexpr const char* kBlockKey = "block";

// Every module of Graph::modules, in tree order: parents before children, siblings in natural
// order (blocks.2 before blocks.10).
std::vector<ModuleInfo> ListModules(const Graph& graph);

// The registry keys of a module with these classes (qualified or bare): see ModuleInfo.
std::vector<std::string> RegistryKeys(const std::vector<std::string>& classes);

// "49.2 KiB".
std::string HumanBytes(int64_t bytes);

// An aligned table: module path indented by depth, bare class (`?` where the export names none),
// the llm-foundry registry keys and `block` (the class-name keys are left out: the class column
// shows them), nodes, parameter bytes. Then a legend: one line per module list of blocks
// (`block = transformer.h.N, N = 0..11 (12 blocks)`), and one for `?` when a class is unknown.
std::string FormatModuleTree(const std::vector<ModuleInfo>& modules);

}  // namespace foundry
