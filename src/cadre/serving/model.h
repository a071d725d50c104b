// Model: what the batcher runs. `Forward` takes one tensor per signature input (rows stacked
// along dimension 0) and returns one per output with the same number of rows.
//
// Thread-safety: `Forward` may be called from several inference threads at once. An
// implementation reports a failure of the model itself (it threw, ran out of memory) by throwing
// ModelError; the batcher turns it into the request's error and goes on serving.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "cadre/serving/tensor.h"

namespace cadre::serving {

class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::vector<HostTensor> Forward(const std::vector<HostTensor>& inputs) = 0;
  // Where the model runs, as the user would name it: "cpu", "cuda:0".
  virtual std::string device() const = 0;
};

}  // namespace cadre::serving
