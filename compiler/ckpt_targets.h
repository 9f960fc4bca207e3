// Choosing what to checkpoint (docs/design.md §3): `--ckpt NAME[=LAYERS]` and `--ckpt-config FILE`, with
// llm-foundry's `activation_checkpointing_target` semantics minus its two known defects (FFN
// names work; several names at once work), matched against the model's module tree
// (compiler/module_tree.h).
//
// A target name is, case-insensitively, one of:
//   - an llm-foundry registry key (every one upstream has, not only the MPT ten); a key whose
//     class is absent from this model is the "matches nothing" error;
//   - a class name, bare (`LlamaAttention`) or qualified (`transformers....LlamaAttention`),
//     matched against every class of the module (bases included, as isinstance would);
//   - `block`: every block instance (module_tree.h says what a block is);
//   - a module-path glob (`transformer.blocks.*.attn`; `*` matches one path segment);
//   - a child name relative to the blocks (`attn` = the child `attn` of every block).
// `grouped_query_attention` also matches MHA and MQA (they subclass GQA upstream).
// Only modules inside blocks (the blocks included) are eligible.
//
// Layers, as llm-foundry's `target_blocks`: an int `n` (the first n layers); a comma-separated
// string of `first-n`, `last-k`, `middle-m`, `range-i-j` (half-open; `middle-m` starts at
// `max_block_idx // 2 - m // 2`); or an explicit list `[0,2,5]` (on the command line, or a list
// of ints and strings in a config). The layer of an instance is the index N of its block.
//
// Nested selections on the same layer: the outermost selected module wins; the inner one is
// dropped and a note says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

// One target: a `--ckpt NAME[=LAYERS]` argument or one entry of an activation_checkpointing_target.
struct CkptTarget {
  std::string name;    // as written (matching is case-insensitive)
  std::string layers;  // llm-foundry target_blocks as text ("3", "first-2,last-1", "[0,2,5]");
                       // "" = every layer
  // Where it came from, for error messages: "--ckpt mptblock=3", "--ckpt-config run.yaml".
  std::string source;
  // "mptblock=first-2,last-1" / "mptblock": the form --ckpt accepts and the report prints.
  std::string Text() const { return layers.empty() ? name : name + "=" + layers; }
};

// Parses one `--ckpt` argument: NAME or NAME=LAYERS. A malformed argument is an error that shows
// the accepted forms.
StatusOr<CkptTarget> ParseCkptArg(const std::string& arg);

// What `--ckpt-config FILE` says (YAML or JSON, read with yaml-cpp):
//   - a bare activation_checkpointing_target value: a string, a list of strings, or a dict
//     {name: layers}; or
//   - a whole llm-foundry training config: the target at `model.activation_checkpointing_target`,
//     switched on by `fsdp_config.activation_checkpointing: true`; then an absent or `[]` target
//     means every block (targets = {block}). When the flag is false or absent nothing is
//     checkpointed (enabled = false), with a warning if a target is set. Its top-level
//     `precision:` (llm-foundry's amp_bf16 / amp_fp16 / fp32 ...) is read too, as written: the
//     CLI checks the value (ParsePrecision) and applies it unless --precision is given.
struct CkptConfig {
  bool enabled = true;
  std::vector<CkptTarget> targets;
  std::optional<std::string> precision;  // a whole config's `precision:` value, when set
  std::vector<std::string> warnings;     // one line each, printed by the CLI as warnings
};
// The file is read whole (a regular file of at most kMaxCkptConfigBytes) and held to what
// OmegaConf, which llm-foundry uses, would read: one document, no anchors, aliases or merge keys,
// no key twice in a mapping; each refused with its line.
StatusOr<CkptConfig> ReadCkptConfig(const std::string& path);
// The same on the file's text; `path` names it in messages.
// `option` names the flag that gave the file in messages ("--ckpt-config", "--config").
StatusOr<CkptConfig> ParseCkptConfigText(const std::string& text, const std::string& path,
                                         const std::string& option = "--ckpt-config");
constexpr int64_t kMaxCkptConfigBytes = int64_t{16} << 20;
// A config file's text (--ckpt-config, --config), read whole up to kMaxCkptConfigBytes
// (base/file_util.h: ReadRegularFile). Errors are one line "SOURCE: ..." (`source`: "--config
// PATH"); a folder or a device is answered with what to give instead ("give the training YAML").
StatusOr<std::string> ReadConfigText(const std::string& source, const std::string& path,
                                     const std::string& folder_advice,
                                     const std::string& device_advice);

// What an llm-foundry YAML may not hold and yaml-cpp would accept, found on the parser's events
// before any node is built: an anchor or alias, a merge key, a key twice in one mapping, a second
// document. "line N: <what>" for the first found, "" when none. yaml-cpp's syntax errors are
// thrown (YAML::ParserException), as YAML::Load throws them.
std::string StrictYamlProblem(const std::string& text);

// The layers of a `layers` spec among `num_layers` blocks, sorted, without duplicates. Errors: a
// malformed spec, a layer out of range.
StatusOr<std::vector<int64_t>> ParseLayerSpec(const std::string& spec, int64_t num_layers);

// One module instance to checkpoint.
struct CkptInstance {
  std::string module;      // "transformer.blocks.3.attn"
  std::string class_name;  // the module's qualified class; "" when the export names none
  int64_t layer = -1;      // the index N of its block
  std::string target;      // CkptTarget::Text() of the target that selected it
  // P of its block P.N ("transformer.blocks"): `module` is P.N or a module inside it. With
  // `layer`, what a report needs to write one line for many layers without parsing paths.
  std::string block_list;
  bool operator==(const CkptInstance&) const = default;
};

// A selected module dropped because a module enclosing it is selected too: the outer target
// wins. Both lie in the same block.
struct CkptNesting {
  CkptInstance inner;  // dropped
  CkptInstance outer;  // the outermost selected module holding `inner`; kept
  bool operator==(const CkptNesting&) const = default;
  // "transformer.blocks.0.attn (grouped_query_attention) is inside transformer.blocks.0
  // (mptblock): the outer target wins".
  std::string Note() const;
};

// The nesting note's words, the module paths as given: the report writes one for many layers
// with paths such as "transformer.blocks.{0..7}.attn".
std::string NestingNote(const std::string& inner_module, const std::string& inner_target,
                        const std::string& outer_module, const std::string& outer_target);

struct CkptSelection {
  std::vector<std::string> targets;     // CkptTarget::Text() of each target, in the order given
  std::vector<CkptInstance> instances;  // the outermost selected modules, in module-tree order
  std::vector<CkptNesting> nested;      // the modules dropped, in module-tree order
  // One line per nested module: its Note().
  std::vector<std::string> notes() const;
};

// Matches the targets against `graph`'s module tree. Errors, each one line:
//   - the model carries no module annotations;
//   - an unknown name (the message lists the names that exist in this model);
//   - a class name on a model whose export names no class (says so and shows the glob that
//     would select the same modules);
//   - a malformed layer spec, a layer out of range;
//   - a target that matches nothing in this model.
StatusOr<CkptSelection> SelectCkptTargets(const Graph& graph,
                                          const std::vector<CkptTarget>& targets);

}  // namespace foundry
