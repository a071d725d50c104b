#include "cadre/serving/signature.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace cadre::serving {
namespace {

using nlohmann::json;

constexpr size_t kMaxDimensions = 64;
constexpr int64_t kMaxRowBytes = int64_t{1} << 30;

Status ParseSpecs(const json& doc, const char* field, std::vector<TensorSpec>* out) {
  if (!doc.contains(field) || !doc[field].is_array() || doc[field].empty()) {
    return InvalidArgument(std::string(field) + ": expected a non-empty list of tensors");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < doc[field].size(); ++i) {
    const json& t = doc[field][i];
    std::string where = std::string(field) + "[" + std::to_string(i) + "]";
    if (!t.is_object()) return InvalidArgument(where + ": expected an object");
    TensorSpec spec;
    if (!t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty()) {
      return InvalidArgument(where + ".name: expected a non-empty string");
    }
    spec.name = t["name"].get<std::string>();
    if (!names.insert(spec.name).second) {
      return InvalidArgument(where + ".name: '" + spec.name + "' appears twice");
    }
    auto dtype = t.contains("datatype") && t["datatype"].is_string()
                     ? ParseDataType(t["datatype"].get<std::string>())
                     : std::nullopt;
    if (!dtype) return InvalidArgument(where + ".datatype: expected one of FP32, INT64, ...");
    spec.dtype = *dtype;
    if (!t.contains("shape") || !t["shape"].is_array() || t["shape"].empty()) {
      return InvalidArgument(where + ".shape: expected a list starting with the batch (-1)");
    }
    if (t["shape"].size() > kMaxDimensions) {
      return InvalidArgument(where + ".shape: " + std::to_string(t["shape"].size()) +
                             " dimensions; a model takes at most " +
                             std::to_string(kMaxDimensions));
    }
    for (size_t i = 0; i < t["shape"].size(); ++i) {
      // A dimension past int64 (a uint64 in JSON) is refused, not wrapped around to -1.
      const json& d = t["shape"][i];
      if (!d.is_number_integer() ||
          (d.is_number_unsigned() && d.get<uint64_t>() > static_cast<uint64_t>(kMaxRowBytes)) ||
          (!d.is_number_unsigned() && (d.get<int64_t>() < -1 || d.get<int64_t>() > kMaxRowBytes))) {
        return InvalidArgument(where + ".shape[" + std::to_string(i) + "]: " + d.dump() +
                               "; dimensions are -1 (any size) or 0.." +
                               std::to_string(kMaxRowBytes));
      }
      spec.shape.push_back(d.get<int64_t>());
    }
    // One row is allocated at load (the model is tried on a row of zeros, free dimensions as
    // 1) and sizes every request: its bytes are bounded. Every factor is at most 2^30 and the
    // product is checked after each one, so it never overflows.
    uint64_t row_bytes = ElementSize(spec.dtype);
    for (size_t i = 1; i < spec.shape.size(); ++i) {
      row_bytes *= static_cast<uint64_t>(std::max<int64_t>(spec.shape[i], 1));
      if (row_bytes > static_cast<uint64_t>(kMaxRowBytes)) {
        return InvalidArgument(where + ".shape " + ShapeString(spec.shape) + ": one row is over " +
                               std::to_string(kMaxRowBytes >> 20) + " MiB of " +
                               std::string(DataTypeName(spec.dtype)) +
                               ", more than the scorer takes");
      }
    }
    out->push_back(std::move(spec));
  }
  return Status::Ok();
}

}  // namespace

int64_t TensorSpec::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) {
    if (shape[i] < 0) return -1;
    n *= shape[i];
  }
  return n;
}

const TensorSpec* ModelSignature::FindInput(const std::string& name) const {
  for (const TensorSpec& spec : inputs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

Status ParseSignature(const std::string& json_text, ModelSignature* out) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("not a JSON object");
  ModelSignature sig;
  if (doc.contains("format") &&
      (!doc["format"].is_string() || doc["format"].get<std::string>() != "cadre-model/1")) {
    return InvalidArgument("format: expected \"cadre-model/1\"");
  }
  if (doc.contains("model_file")) {
    if (!doc["model_file"].is_string() || doc["model_file"].get<std::string>().empty() ||
        doc["model_file"].get<std::string>().find('/') != std::string::npos) {
      return InvalidArgument("model_file: expected a file name in the model folder");
    }
    sig.model_file = doc["model_file"].get<std::string>();
  }
  CADRE_RETURN_IF_ERROR(ParseSpecs(doc, "inputs", &sig.inputs));
  CADRE_RETURN_IF_ERROR(ParseSpecs(doc, "outputs", &sig.outputs));
  if (doc.contains("labels") && !doc["labels"].is_null()) {
    if (!doc["labels"].is_array()) return InvalidArgument("labels: expected a list of strings");
    for (const json& l : doc["labels"]) {
      if (!l.is_string()) return InvalidArgument("labels: expected a list of strings");
      sig.labels.push_back(l.get<std::string>());
    }
    const TensorSpec& first = sig.outputs[0];
    if (!sig.labels.empty() &&
        (first.shape.size() < 2 || first.shape.back() != static_cast<int64_t>(sig.labels.size()))) {
      return InvalidArgument("labels: " + std::to_string(sig.labels.size()) +
                             " labels, but outputs[0] has shape " + ShapeString(first.shape));
    }
  }
  *out = std::move(sig);
  return Status::Ok();
}

Status LoadSignature(const std::filesystem::path& dir, ModelSignature* out) {
  std::filesystem::path file = dir / "model.json";
  std::ifstream in(file);
  if (!in) {
    return NotFound(file.string() + " does not exist: a model folder holds model.json and " +
                    "model.pt (saved by cadre.save_model)");
  }
  std::stringstream text;
  text << in.rdbuf();
  Status s = ParseSignature(text.str(), out);
  if (!s.ok()) return s.WithContext(file.string());
  if (!std::filesystem::is_regular_file(dir / out->model_file)) {
    return NotFound((dir / out->model_file).string() + " (named by model.json) does not exist");
  }
  return Status::Ok();
}

}  // namespace cadre::serving
