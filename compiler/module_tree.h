// The module tree of an imported model, as `foundry-compile --list-modules` prints it and as
// target selection (--ckpt) matches against it: per module instance its classes, the --ckpt names
// that select it (llm-foundry's activation_checkpointing_target registry keys, docs/design.md §3), the
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

#include "base/bytes.h"  // HumanBytes: the sizes FormatModuleTree and the CLIs print
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

// llm-foundry's activation_checkpointing_target registry, in full: every key upstream's
// get_act_ckpt_module accepts (mptblock, norm_attn_norm, the attention_classes, ffns,
// ffns_with_norm, ffns_with_megablocks and norms registries) with the class it selects. A key
// selects a module whose class or a base of it has `bare_class` as its last segment; `package`
// is where upstream defines the class and, when `package_only`, the only package it is taken from
// (megablocks' `MoE` and `dMoE` share their bare names with other classes).
struct CkptRegistryEntry {
  const char* key;
  const char* bare_class;
  const char* package;
  bool package_only;
};
const std::vector<CkptRegistryEntry>& CkptRegistry();
bool IsCkptRegistryKey(const std::string& lowercase_name);

// Natural order of module paths (blocks.2 before blocks.10), the order of ListModules.
bool ModulePathLess(const std::string& a, const std::string& b);

// Every module of Graph::modules, in tree order: parents before children, siblings in natural
// order (blocks.2 before blocks.10).
std::vector<ModuleInfo> ListModules(const Graph& graph);

// The registry keys of a module with these classes (qualified or bare): see ModuleInfo.
std::vector<std::string> RegistryKeys(const std::vector<std::string>& classes);

// An aligned table: module path indented by depth, bare class (`?` where the export names none),
// the --ckpt keys that select the module (its llm-foundry registry keys, `block`, its own class
// name in lowercase, and for a child of a block its attribute name when that name does not
// resolve to something else first; base-class names select too but are left out to keep the
// column short), nodes, parameter bytes. Then a legend: one line per module list of blocks
// (`block = transformer.h.N, N = 0..11 (12 blocks)`), and one for `?` when a class is unknown.
std::string FormatModuleTree(const std::vector<ModuleInfo>& modules);

}  // namespace foundry
