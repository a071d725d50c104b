// WML v4 prediction bodies (codec.h).
#include <algorithm>
#include <cmath>

#include "cadre/serving/codec.h"
#include "cadre/serving/json_values.h"

namespace cadre::serving {
namespace {

using nlohmann::json;

// How the `fields` of one input_data entry map onto the model's inputs.
struct Layout {
  std::vector<size_t> input_of_field;  // by-name: the signature input of each field
  bool features = false;               // one input, each field one of its K row elements
};

Status ChooseLayout(const json& fields, size_t values_per_row, const std::string& where,
                    const ModelSignature& signature, Layout* layout) {
  std::vector<std::string> names;
  if (!fields.is_null()) {
    if (!fields.is_array()) return InvalidArgument(where + ".fields: expected a list of names");
    for (const json& f : fields) {
      if (!f.is_string()) return InvalidArgument(where + ".fields: expected a list of names");
      names.push_back(f.get<std::string>());
    }
  }
  // By name: the fields are exactly the model's inputs, in any order.
  if (!names.empty() && names.size() == signature.inputs.size()) {
    std::vector<size_t> slots;
    for (const std::string& n : names) {
      const TensorSpec* spec = signature.FindInput(n);
      if (!spec) break;
      slots.push_back(static_cast<size_t>(spec - signature.inputs.data()));
    }
    std::vector<size_t> sorted = slots;
    std::sort(sorted.begin(), sorted.end());
    if (slots.size() == names.size() &&
        std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) {
      layout->input_of_field = slots;
      return Status::Ok();
    }
  }
  if (signature.inputs.size() == 1) {
    const TensorSpec& in = signature.inputs[0];
    int64_t k = in.row_elements();
    size_t count = names.empty() ? values_per_row : names.size();
    if (names.empty() && count == 1) {  // no fields, one value per row: the whole row
      layout->input_of_field = {0};
      return Status::Ok();
    }
    if (k > 0 && static_cast<int64_t>(count) == k) {
      layout->features = true;
      return Status::Ok();
    }
  }
  std::string takes;
  for (const TensorSpec& s : signature.inputs) {
    takes += (takes.empty() ? "" : ", ") + s.name + " " + ShapeString(s.shape);
  }
  std::string alt = signature.inputs.size() == 1 && signature.inputs[0].row_elements() > 0
                        ? ", or " + std::to_string(signature.inputs[0].row_elements()) +
                              " feature fields of one number each"
                        : "";
  return InvalidArgument(where + ".fields: " + (names.empty() ? "missing" : json(names).dump()) +
                         " do not match the model's inputs; expected the fields [" + takes + "]" +
                         alt);
}

Status DecodeGroup(const json& entry, const std::string& where, const ModelSignature& signature,
                   std::vector<HostTensor>* out) {
  if (!entry.is_object()) return InvalidArgument(where + ": expected {\"fields\", \"values\"}");
  if (!entry.contains("values") || !entry["values"].is_array()) {
    return InvalidArgument(where + ".values: missing; expected a list of rows");
  }
  const json& values = entry["values"];
  if (values.empty()) return InvalidArgument(where + ".values: an empty batch (no rows)");
  if (!values[0].is_array()) {
    return InvalidArgument(where + ".values[0]: expected a row (a list), not " +
                           json_values::Brief(values[0]));
  }
  Layout layout;
  CADRE_RETURN_IF_ERROR(ChooseLayout(entry.contains("fields") ? entry["fields"] : json(),
                                     values[0].size(), where, signature, &layout));
  const int64_t rows = static_cast<int64_t>(values.size());
  std::vector<HostTensor> tensors(signature.inputs.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = signature.inputs[i];
    if (spec.row_elements() < 0) {
      return InvalidArgument("input '" + spec.name + "' has free dimensions " +
                             ShapeString(spec.shape) +
                             "; score it through /v2/models/NAME/infer "
                             "with an explicit shape");
    }
    tensors[i].dtype = spec.dtype;
    tensors[i].shape = spec.shape;
    tensors[i].shape[0] = rows;
  }
  const size_t per_row = layout.features ? static_cast<size_t>(signature.inputs[0].row_elements())
                                         : layout.input_of_field.size();
  for (int64_t r = 0; r < rows; ++r) {
    const json& row = values[static_cast<size_t>(r)];
    std::string at = where + ".values[" + std::to_string(r) + "]";
    // Grown row by row as the rows are read: a count of rows alone never sizes an allocation
    // (a body of many one-number rows for a model of large rows would otherwise claim
    // gigabytes before the first row is found wrong).
    for (HostTensor& t : tensors) t.data.resize(static_cast<size_t>(r + 1) * t.row_bytes());
    if (!row.is_array() || row.size() != per_row) {
      return InvalidArgument(
          at + ": expected a row of " + std::to_string(per_row) + " values (one per field), got " +
          (row.is_array() ? std::to_string(row.size()) + " values" : json_values::Brief(row)));
    }
    if (layout.features) {
      HostTensor& t = tensors[0];
      int64_t next = r * signature.inputs[0].row_elements();
      for (const json& v : row) {
        if (v.is_array()) return InvalidArgument(at + ": feature values are single numbers");
        CADRE_RETURN_IF_ERROR(json_values::FillElements(v, at, t, &next));
      }
      continue;
    }
    for (size_t f = 0; f < per_row; ++f) {
      size_t slot = layout.input_of_field[f];
      const TensorSpec& spec = signature.inputs[slot];
      int64_t begin = r * spec.row_elements();
      int64_t next = begin;
      std::string field = at + "[" + std::to_string(f) + "] ('" + spec.name + "')";
      CADRE_RETURN_IF_ERROR(json_values::FillElements(row[f], field, tensors[slot], &next));
      if (next - begin != spec.row_elements()) {
        return InvalidArgument(field + ": " + std::to_string(next - begin) + " values; one row " +
                               "of '" + spec.name + "' has shape " + ShapeString(spec.row_shape()) +
                               " (" + std::to_string(spec.row_elements()) + " values)");
      }
    }
  }
  *out = std::move(tensors);
  return Status::Ok();
}

}  // namespace

Status DecodeWmlRequest(std::string_view body, const ModelSignature& signature, WmlRequest* out) {
  json doc;
  CADRE_RETURN_IF_ERROR(json_values::Parse(body, &doc));
  if (!doc.is_object() || !doc.contains("input_data")) {
    return InvalidArgument(
        "input_data: missing; expected {\"input_data\": [{\"fields\": [...], "
        "\"values\": [[...]]}]}");
  }
  const json& data = doc["input_data"];
  if (!data.is_array() || data.empty()) {
    return InvalidArgument("input_data: expected a non-empty list of {\"fields\", \"values\"}");
  }
  WmlRequest req;
  for (size_t g = 0; g < data.size(); ++g) {
    std::vector<HostTensor> group;
    CADRE_RETURN_IF_ERROR(
        DecodeGroup(data[g], "input_data[" + std::to_string(g) + "]", signature, &group));
    req.groups.push_back(std::move(group));
  }
  *out = std::move(req);
  return Status::Ok();
}

std::string EncodeWmlResponse(const ModelSignature& signature,
                              const std::vector<std::vector<HostTensor>>& outputs) {
  json predictions = json::array();
  const bool labelled = !signature.labels.empty();
  for (const std::vector<HostTensor>& group : outputs) {
    json fields = json::array();
    if (labelled) fields.push_back("prediction");
    for (const TensorSpec& s : signature.outputs) fields.push_back(s.name);
    json values = json::array();
    const int64_t rows = group.empty() ? 0 : group[0].rows();
    for (int64_t r = 0; r < rows; ++r) {
      json row = json::array();
      if (labelled) {
        const HostTensor& scores = group[0];
        int64_t width = static_cast<int64_t>(signature.labels.size());
        if (scores.elements() != rows * width) {  // not one score per label: no prediction
          row.push_back(nullptr);
          for (const HostTensor& t : group) row.push_back(json_values::Row(t, r));
          values.push_back(std::move(row));
          continue;
        }
        // As torch.argmax: the first highest score, a NaN being higher than any number.
        int64_t best = 0;
        for (int64_t c = 1; c < width && !std::isnan(ElementAsDouble(scores, r * width + best));
             ++c) {
          double v = ElementAsDouble(scores, r * width + c);
          if (std::isnan(v) || v > ElementAsDouble(scores, r * width + best)) best = c;
        }
        row.push_back(signature.labels[static_cast<size_t>(best)]);
      }
      for (const HostTensor& t : group) row.push_back(json_values::Row(t, r));
      values.push_back(std::move(row));
    }
    predictions.push_back({{"fields", std::move(fields)}, {"values", std::move(values)}});
  }
  json doc = {{"predictions", std::move(predictions)}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace cadre::serving
