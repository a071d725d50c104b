// ModelSignature: what a saved model takes and returns, read from the model folder's model.json
// (written by cadre.save_model; the format is described in python/cadre/serving.py and
// docs/serving.md). Every request is checked against it before it reaches the model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/serving/tensor.h"

namespace cadre::serving {

struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kFp32;
  std::vector<int64_t> shape;  // shape[0] is the batch (-1); -1 elsewhere: any size

  // Shape of one row (shape without the batch dimension), and its element count when every
  // dimension is fixed (-1 otherwise).
  std::vector<int64_t> row_shape() const { return {shape.begin() + 1, shape.end()}; }
  int64_t row_elements() const;
};

struct ModelSignature {
  std::string model_file = "model.pt";
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<std::string> labels;  // names of the first output's classes; may be empty

  const TensorSpec* FindInput(const std::string& name) const;
};

// Parses model.json's text; errors name the field ("inputs[0].datatype: ...").
Status ParseSignature(const std::string& json_text, ModelSignature* out);

// Reads `<dir>/model.json` and checks that the model file it names exists.
Status LoadSignature(const std::filesystem::path& dir, ModelSignature* out);

}  // namespace cadre::serving
