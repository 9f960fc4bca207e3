// A light second look at a model file, for what the importer does not keep: the external data
// files its tensors name (foundry-compile checks its outputs against them, so it never writes
// over its own input) and the symbolic dimension names of its inputs (recorded in the plan; the
// importer binds --dim values in place of the names).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace foundry {

struct ModelFiles {
  // The model's folder joined with each external data `location`, as the importer resolves
  // them; each once, in order of first use: initializers, then tensors in node attributes
  // (subgraphs and local functions included).
  std::vector<std::string> external_data;
  // Graph input -> its dim_param per axis ("" for a fixed axis); inputs without any left out.
  std::map<std::string, std::vector<std::string>> input_dims;
  // Graph input -> its size per axis (-1 where the model gives none), for every input with a
  // shape.
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Graph input -> the decimal dim_param per axis ("" elsewhere): a size torch specialised while
  // asked to keep the axis dynamic (it writes the traced size as the name, "2", "16"); inputs
  // without any left out.
  std::map<std::string, std::vector<std::string>> input_specialised;
};

StatusOr<ModelFiles> InspectModelFile(const std::string& model_path);

// Dimension bindings by position, turned into the names the model gives those axes, so a user
// need not know them (torch.export names them s0, s1, ...):
//  - a key of `dims` that is one of the model's dimension names stays;
//  - a key INPUT.AXIS (INPUT a graph input, AXIS a 0-based index) becomes the name of that axis
//    ("input_ids.1" -> "seq");
//  - `shapes` (INPUT -> every axis' size, --input-shape input_ids=8x2048) binds the name of each
//    named axis; a fixed axis must have the size given;
//  - an axis torch specialised (a decimal dim_param) keeps its size unless a binding gives it
//    another: then the decimal name is bound (the importer makes it symbolic and refuses the
//    rebinding where a constant of the graph holds the old size).
// A name bound twice to different sizes, an unknown input, an axis out of range, or one the
// model fixed (or left unnamed) is an error naming the option and what the input has.
StatusOr<std::map<std::string, int64_t>> ResolveInputDims(
    const ModelFiles& files, const std::map<std::string, int64_t>& dims,
    const std::map<std::string, std::vector<int64_t>>& shapes);

}  // namespace foundry
