// Request and answer bodies of the two scoring protocols, checked against a ModelSignature:
//
// - Open Inference Protocol v2 (KServe, Triton): POST /v2/models/NAME/infer
//     {"id": "..", "inputs": [{"name", "shape", "datatype", "data": flat or nested}],
//      "outputs": [{"name"}]}  ->  {"model_name", "id", "outputs": [{"name", "shape",
//      "datatype", "data": flat}]}
// - WML v4 (Watson Machine Learning): POST /ml/v4/deployments/ID/predictions
//     {"input_data": [{"fields": [..], "values": [[..], ..]}]}
//     -> {"predictions": [{"fields": [..], "values": [[..], ..]}]}
//   `fields` either name the model's inputs (each row holds one value per input: a number or a
//   nested list of the input's row shape) or, for a model of one input of K elements per row,
//   are K feature names (each row holds K numbers). With class labels the answer's fields are
//   "prediction" (the label of the highest score) followed by the output names.
//
// Decoding never throws: malformed bodies come back as kInvalidArgument naming the field and,
// for shapes and datatypes, what the model expects. JSON's missing NaN and Infinity are accepted
// as Python writes them (bare NaN, Infinity, -Infinity) and as strings ("NaN", "inf", ...) where
// a floating-point value is expected.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/serving/signature.h"
#include "cadre/serving/tensor.h"

namespace cadre::serving {

struct V2Request {
  std::string id;                  // echoed in the answer when present
  std::vector<HostTensor> inputs;  // in the signature's input order
  std::vector<size_t> outputs;     // indices into signature.outputs to answer with
};

Status DecodeV2Request(std::string_view body, const ModelSignature& signature, V2Request* out);
std::string EncodeV2Response(const std::string& model_name, const V2Request& request,
                             const ModelSignature& signature,
                             const std::vector<HostTensor>& outputs);

// One `input_data` entry becomes one group of inputs (its rows), answered by one `predictions`
// entry.
struct WmlRequest {
  std::vector<std::vector<HostTensor>> groups;
};

Status DecodeWmlRequest(std::string_view body, const ModelSignature& signature, WmlRequest* out);
// `outputs[g]` answers `groups[g]`.
std::string EncodeWmlResponse(const ModelSignature& signature,
                              const std::vector<std::vector<HostTensor>>& outputs);

// {"name", "versions", "platform", "inputs", "outputs"} for GET /v2/models/NAME.
std::string EncodeV2Metadata(const std::string& model_name, const ModelSignature& signature,
                             const std::string& device);

}  // namespace cadre::serving
