// The committed fixtures (models/fixtures/*) as the runtime tests train them: each fixture's
// folder with its input files as --feed specs, and the compile foundry-compile MODEL --dim ...
// -o PREFIX performs, done in memory.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ckpt_targets.h"
#include "passes/autocast.h"
#include "runtime/loaded_plan.h"

namespace foundry {

struct TrainingFixture {
  std::filesystem::path dir;
  std::vector<std::string> feeds;  // NAME=FILE.pb, one per file in inputs/, sorted
};

// Every fixture under `fixtures_dir` that has an inputs/ folder, sorted by folder.
std::vector<TrainingFixture> TrainingFixtures(const std::filesystem::path& fixtures_dir);

// The training plan of `model` with its symbolic dimensions bound from the shapes of the fed
// tensors, checked as LoadPlan checks a plan file, with the memory plan foundry-compile makes (a
// layout for every backend the build has: CompiledBackendSpecs).
// `checkpoint`: module instances the remat pass checkpoints (none: the plain plan);
// `precision`: foundry-compile's --precision.
StatusOr<LoadedPlan> CompileFixture(const std::filesystem::path& model,
                                    const std::vector<std::string>& feeds,
                                    const std::vector<std::string>& checkpoint = {},
                                    Precision precision = Precision::kFp32);

// The same with checkpointing targets (`--ckpt` arguments, parsed), resolved by SelectCkptTargets
// on the imported graph as foundry-compile does; `selection` (if given) receives what they chose.
StatusOr<LoadedPlan> CompileFixture(const std::filesystem::path& model,
                                    const std::vector<std::string>& feeds,
                                    const std::vector<CkptTarget>& targets,
                                    CkptSelection* selection = nullptr,
                                    Precision precision = Precision::kFp32);

// One checkpointed compile of a committed fixture, for the proofs that checkpointing changes no
// number and no byte of the accounting: the `--ckpt` arguments as a user types them and the
// module instances they must select (sorted).
struct CkptCase {
  std::string fixture;                 // a folder of models/fixtures
  std::string file;                    // model.onnx (annotated) or model.stock.onnx (plain export)
  std::vector<std::string> ckpt;       // --ckpt arguments
  std::vector<std::string> instances;  // the modules they select, sorted
  std::string Name() const;            // "mpt_tiny/model.onnx --ckpt mptblock"
};

// Every target form on every fixture kind, each at least once (the forms of docs/design.md §3), not the
// whole cross product (the suite also runs under the sanitizers at -O0):
//  - MPT, annotated: on every MPT fixture each registry key its classes answer to (MHA, MQA, GQA;
//    MLP, GLU; the four norms); on mpt_tiny and mpt_tiny_dropout (the fixture with dropout on)
//    also a class name, a path glob, a child name relative to the blocks, `block`, several
//    targets at once, nested targets; the layer forms (n, first-, last-, middle-, range-, an
//    explicit list, combined) on mpt_tiny_4layer;
//  - Llama, GPT-2, Pythia, BERT, annotated: their class names, `block`, a glob, a registry key
//    where one answers (layernorm), several at once;
//  - stock exports (no classes): `block` on every one; a glob and a relative child name on each
//    family (mpt_tiny and mpt_tiny_dropout for MPT).
std::vector<CkptCase> CheckpointCases();

// The case's fixture under `fixtures_dir` (models/fixtures), with its feeds.
StatusOr<TrainingFixture> FixtureOf(const std::filesystem::path& fixtures_dir, const CkptCase& c);

// The case's plan: its fixture compiled with the case's --ckpt arguments (ParseCkptArg,
// SelectCkptTargets); an error unless they select exactly the case's instances.
StatusOr<LoadedPlan> CompileCkptCase(const std::filesystem::path& fixtures_dir, const CkptCase& c,
                                     Precision precision = Precision::kFp32);

}  // namespace foundry
