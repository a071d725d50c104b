// Open Inference Protocol v2 bodies (codec.h).
#include <optional>
#include <set>

#include "cadre/serving/codec.h"
#include "cadre/serving/json_values.h"

namespace cadre::serving {
namespace {

using nlohmann::json;

json SpecJson(const TensorSpec& spec) {
  return {{"name", spec.name}, {"datatype", DataTypeName(spec.dtype)}, {"shape", spec.shape}};
}

std::string Names(const std::vector<TensorSpec>& specs) {
  std::string s;
  for (const TensorSpec& spec : specs) s += (s.empty() ? "'" : ", '") + spec.name + "'";
  return s;
}

// Checks a request's shape for `spec`: the batch first, then the row shape.
Status CheckShape(const std::string& where, const TensorSpec& spec,
                  const std::vector<int64_t>& shape) {
  std::string expected = "; the model expects " + ShapeString(spec.shape) + " (-1: any size)";
  if (shape.size() != spec.shape.size()) {
    return InvalidArgument(where + ".shape " + ShapeString(shape) + " has " +
                           std::to_string(shape.size()) + " dimensions" + expected);
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return InvalidArgument(where + ".shape " + ShapeString(shape) + " has " +
                             std::to_string(shape[d]) + " at dimension " + std::to_string(d) +
                             ": a request gives the actual size of every dimension (here the " +
                             "number of values along it); -1 appears only in the model's " +
                             "shape " + ShapeString(spec.shape) + ", for the dimension it " +
                             "lets vary");
    }
    if ((d > 0 && spec.shape[d] >= 0 && shape[d] != spec.shape[d])) {
      return InvalidArgument(where + ".shape " + ShapeString(shape) + " differs at dimension " +
                             std::to_string(d) + expected);
    }
  }
  if (shape[0] == 0) return InvalidArgument(where + ".shape: an empty batch (0 rows)");
  return Status::Ok();
}

// The protocol takes `data` flat in row-major order or in the tensor's own nested form: a list
// of shape[0] lists of shape[1] ... values. Any other nesting is refused, naming the list at
// fault, rather than flattened into a tensor the client did not describe.
Status CheckNested(const json& value, const std::vector<int64_t>& shape, size_t dim,
                   const std::string& at) {
  std::string nested_as =
      "; give data flat in row-major order or nested as the shape " + ShapeString(shape);
  if (dim == shape.size()) {
    if (!value.is_array()) return Status::Ok();
    return InvalidArgument(at + ": a list where the shape has a single value (nested deeper " +
                           "than its " + std::to_string(shape.size()) + " dimensions)" + nested_as);
  }
  if (!value.is_array()) {
    return InvalidArgument(at + ": " + json_values::Brief(value) +
                           " where the shape has a list of " + std::to_string(shape[dim]) +
                           " (dimension " + std::to_string(dim) + ")" + nested_as);
  }
  if (static_cast<int64_t>(value.size()) != shape[dim]) {
    return InvalidArgument(at + ": a list of " + std::to_string(value.size()) +
                           " where the shape has " + std::to_string(shape[dim]) + " at dimension " +
                           std::to_string(dim) + nested_as);
  }
  for (size_t i = 0; i < value.size(); ++i) {
    CADRE_RETURN_IF_ERROR(
        CheckNested(value[i], shape, dim + 1, at + "[" + std::to_string(i) + "]"));
  }
  return Status::Ok();
}

Status CheckNesting(const json& data, const std::vector<int64_t>& shape, const std::string& at) {
  if (!data.is_array()) return Status::Ok();  // one value: the count check below judges it
  for (const json& v : data) {
    if (v.is_array()) return CheckNested(data, shape, 0, at);
  }
  return Status::Ok();  // flat
}

Status DecodeInput(const json& in, size_t index, const ModelSignature& signature,
                   std::vector<HostTensor>* tensors, std::set<size_t>* seen) {
  std::string where = "inputs[" + std::to_string(index) + "]";
  if (!in.is_object()) return InvalidArgument(where + ": expected an object");
  if (!in.contains("name") || !in["name"].is_string()) {
    return InvalidArgument(where + ".name: missing; the model takes " + Names(signature.inputs));
  }
  std::string name = in["name"].get<std::string>();
  const TensorSpec* spec = signature.FindInput(name);
  if (!spec) {
    return InvalidArgument(where + ".name: the model has no input '" + name + "'; it takes " +
                           Names(signature.inputs));
  }
  where += " ('" + name + "')";
  size_t slot = static_cast<size_t>(spec - signature.inputs.data());
  if (!seen->insert(slot).second) return InvalidArgument(where + ": given twice");
  if (!in.contains("datatype") || !in["datatype"].is_string()) {
    return InvalidArgument(where + ".datatype: missing; the model expects " +
                           std::string(DataTypeName(spec->dtype)));
  }
  std::string dtype = in["datatype"].get<std::string>();
  if (dtype != DataTypeName(spec->dtype)) {
    return InvalidArgument(where + ".datatype: " + dtype + " given; the model expects " +
                           std::string(DataTypeName(spec->dtype)));
  }
  if (!in.contains("shape") || !in["shape"].is_array()) {
    return InvalidArgument(where + ".shape: " +
                           (in.contains("shape")
                                ? "a list of dimensions, not " + json_values::Brief(in["shape"])
                                : std::string("missing")) +
                           "; the model expects " + ShapeString(spec->shape) + " (-1: any size)");
  }
  HostTensor t;
  t.dtype = spec->dtype;
  for (const json& d : in["shape"]) {
    if (!d.is_number_integer()) {
      return InvalidArgument(where + ".shape: dimensions are whole numbers, not " +
                             json_values::Brief(d));
    }
    t.shape.push_back(d.get<int64_t>());
  }
  CADRE_RETURN_IF_ERROR(CheckShape(where, *spec, t.shape));
  if (!in.contains("data")) return InvalidArgument(where + ".data: missing");
  // The values are counted before the tensor is allocated: its size comes from the body's
  // values, never from a shape alone.
  int64_t given = 0;
  CADRE_RETURN_IF_ERROR(json_values::CountLeaves(in["data"], where + ".data", &given));
  CADRE_RETURN_IF_ERROR(CheckNesting(in["data"], t.shape, where + ".data"));
  std::optional<int64_t> holds = NumElements(t.shape);
  if (holds != given) {
    return InvalidArgument(where + ".data: " + std::to_string(given) + " values for shape " +
                           ShapeString(t.shape) + ", which holds " +
                           (holds ? std::to_string(*holds) : std::string("more than 2^63")));
  }
  t.data.assign(static_cast<size_t>(given) * ElementSize(t.dtype), std::byte{0});
  int64_t filled = 0;
  CADRE_RETURN_IF_ERROR(json_values::FillElements(in["data"], where + ".data", t, &filled));
  (*tensors)[slot] = std::move(t);
  return Status::Ok();
}

}  // namespace

Status DecodeV2Request(std::string_view body, const ModelSignature& signature, V2Request* out) {
  json doc;
  CADRE_RETURN_IF_ERROR(json_values::Parse(body, &doc));
  if (!doc.is_object()) return InvalidArgument("the body must be a JSON object");
  V2Request req;
  if (doc.contains("id")) {
    if (!doc["id"].is_string()) return InvalidArgument("id: expected a string");
    req.id = doc["id"].get<std::string>();
  }
  if (!doc.contains("inputs") || !doc["inputs"].is_array()) {
    return InvalidArgument("inputs: missing; expected a list of {name, shape, datatype, data}");
  }
  req.inputs.resize(signature.inputs.size());
  std::set<size_t> seen;
  for (size_t i = 0; i < doc["inputs"].size(); ++i) {
    CADRE_RETURN_IF_ERROR(DecodeInput(doc["inputs"][i], i, signature, &req.inputs, &seen));
  }
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    if (!seen.count(i)) {
      return InvalidArgument("inputs: the model's input '" + signature.inputs[i].name +
                             "' is missing");
    }
    if (req.inputs[i].rows() != req.inputs[0].rows()) {
      return InvalidArgument("inputs: '" + signature.inputs[i].name + "' has " +
                             std::to_string(req.inputs[i].rows()) + " rows and '" +
                             signature.inputs[0].name + "' " +
                             std::to_string(req.inputs[0].rows()) + "; the batch must agree");
    }
  }
  if (doc.contains("outputs")) {
    if (!doc["outputs"].is_array()) return InvalidArgument("outputs: expected a list");
    for (size_t i = 0; i < doc["outputs"].size(); ++i) {
      const json& o = doc["outputs"][i];
      std::string where = "outputs[" + std::to_string(i) + "].name";
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) {
        return InvalidArgument(where + ": missing");
      }
      size_t k = 0;
      while (k < signature.outputs.size() && signature.outputs[k].name != o["name"]) ++k;
      if (k == signature.outputs.size()) {
        return InvalidArgument(where + ": the model has no output '" +
                               o["name"].get<std::string>() + "'; it has " +
                               Names(signature.outputs));
      }
      req.outputs.push_back(k);
    }
  }
  if (req.outputs.empty()) {
    for (size_t k = 0; k < signature.outputs.size(); ++k) req.outputs.push_back(k);
  }
  *out = std::move(req);
  return Status::Ok();
}

std::string EncodeV2Response(const std::string& model_name, const V2Request& request,
                             const ModelSignature& signature,
                             const std::vector<HostTensor>& outputs) {
  json doc = {{"model_name", model_name}, {"model_version", "1"}};
  if (!request.id.empty()) doc["id"] = request.id;
  json outs = json::array();
  for (size_t k : request.outputs) {
    const HostTensor& t = outputs[k];
    outs.push_back({{"name", signature.outputs[k].name},
                    {"datatype", DataTypeName(t.dtype)},
                    {"shape", t.shape},
                    {"data", json_values::Flat(t)}});
  }
  doc["outputs"] = std::move(outs);
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string EncodeV2Metadata(const std::string& model_name, const ModelSignature& signature,
                             const std::string& device) {
  json inputs = json::array(), outputs = json::array();
  for (const TensorSpec& s : signature.inputs) inputs.push_back(SpecJson(s));
  for (const TensorSpec& s : signature.outputs) outputs.push_back(SpecJson(s));
  json doc = {{"name", model_name}, {"versions", {"1"}},  {"platform", "pytorch_torchscript"},
              {"inputs", inputs},   {"outputs", outputs}, {"parameters", {{"device", device}}}};
  if (!signature.labels.empty()) doc["parameters"]["labels"] = signature.labels;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace cadre::serving
