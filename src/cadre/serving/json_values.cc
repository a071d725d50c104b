#include "cadre/serving/json_values.h"

#include <cmath>
#include <limits>

namespace cadre::serving::json_values {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 32;

// Replaces bare NaN / Infinity / -Infinity tokens outside strings with quoted ones.
std::string QuoteNonFinite(std::string_view body) {
  std::string out;
  out.reserve(body.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < body.size()) {
        out += body[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    for (std::string_view token : {"NaN", "Infinity", "-Infinity"}) {
      if (body.substr(i, token.size()) == token) {
        out += '"';
        out += token;
        out += '"';
        i += token.size() - 1;
        c = 0;
        break;
      }
    }
    if (c) out += c;
  }
  return out;
}

std::optional<double> NonFinite(const std::string& s) {
  if (s == "NaN" || s == "nan" || s == "NAN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "Infinity" || s == "inf" || s == "Inf" || s == "+inf" || s == "INF")
    return std::numeric_limits<double>::infinity();
  if (s == "-Infinity" || s == "-inf" || s == "-Inf" || s == "-INF")
    return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

std::pair<int64_t, int64_t> IntRange(DataType t) {
  switch (t) {
    case DataType::kBool:
      return {0, 1};
    case DataType::kUint8:
      return {0, 255};
    case DataType::kInt8:
      return {-128, 127};
    case DataType::kInt16:
      return {-32768, 32767};
    case DataType::kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

Status Leaf(const json& v, const std::string& where, HostTensor& t, int64_t i) {
  std::string at = where + ": element " + std::to_string(i);
  std::string want = std::string(DataTypeName(t.dtype));
  // true/false are BOOL values only: read as 1/0 for a number, they would hide a client's
  // mix-up of inputs.
  if (v.is_boolean() && t.dtype != DataType::kBool) {
    return InvalidArgument(at + " is " + Brief(v) + "; " + want +
                           " numbers belong here (true/false only for BOOL)");
  }
  if (IsFloating(t.dtype)) {
    if (v.is_number()) {
      SetElementFromDouble(t, i, v.get<double>());
      return Status::Ok();
    }
    if (v.is_string()) {
      if (auto d = NonFinite(v.get<std::string>())) {
        SetElementFromDouble(t, i, *d);
        return Status::Ok();
      }
    }
    return InvalidArgument(at + " is " + Brief(v) + "; " + want + " numbers belong here");
  }
  int64_t value = 0;
  if (v.is_boolean()) {
    value = v.get<bool>();
  } else if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument(at + " (" + std::to_string(u) + ") is out of range for " + want);
    }
    value = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::trunc(d) || std::fabs(d) > 9.2e18) {
      return InvalidArgument(at + " is " + Brief(v) + "; " + want + " (whole numbers) expected");
    }
    value = static_cast<int64_t>(d);
  } else {
    return InvalidArgument(at + " is " + Brief(v) + "; " + want + " numbers belong here");
  }
  auto [lo, hi] = IntRange(t.dtype);
  if (value < lo || value > hi) {
    return InvalidArgument(at + " (" + std::to_string(value) + ") is out of range for " + want);
  }
  SetElementFromInt(t, i, value);
  return Status::Ok();
}

Status Fill(const json& value, const std::string& where, HostTensor& t, int64_t* next,
            int64_t total, int depth) {
  if (value.is_array()) {
    if (depth >= kMaxDepth) return InvalidArgument(where + ": nested too deeply");
    for (const json& v : value) {
      CADRE_RETURN_IF_ERROR(Fill(v, where, t, next, total, depth + 1));
    }
    return Status::Ok();
  }
  if (*next >= total) {
    return InvalidArgument(where + ": more values than the shape " + ShapeString(t.shape) +
                           " holds (" + std::to_string(total) + ")");
  }
  CADRE_RETURN_IF_ERROR(Leaf(value, where, t, *next));
  ++*next;
  return Status::Ok();
}

Status Count(const json& value, const std::string& where, int64_t* count, int depth) {
  if (!value.is_array()) {
    ++*count;
    return Status::Ok();
  }
  if (depth >= kMaxDepth) return InvalidArgument(where + ": nested too deeply");
  for (const json& v : value) CADRE_RETURN_IF_ERROR(Count(v, where, count, depth + 1));
  return Status::Ok();
}

json Element(const HostTensor& t, int64_t i) {
  if (t.dtype == DataType::kBool) return ElementAsInt(t, i) != 0;
  if (IsFloating(t.dtype)) return ElementAsDouble(t, i);
  return ElementAsInt(t, i);
}

json Nested(const HostTensor& t, size_t dim, int64_t* next) {
  json a = json::array();
  for (int64_t k = 0; k < t.shape[dim]; ++k) {
    if (dim + 1 == t.shape.size()) {
      a.push_back(Element(t, (*next)++));
    } else {
      a.push_back(Nested(t, dim + 1, next));
    }
  }
  return a;
}

}  // namespace

Status Parse(std::string_view body, json* doc) {
  *doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc->is_discarded()) return Status::Ok();
  *doc = json::parse(QuoteNonFinite(body), nullptr, false);
  if (!doc->is_discarded()) return Status::Ok();
  try {
    json ignored = json::parse(body);
  } catch (const json::parse_error& e) {
    return InvalidArgument(std::string("the body is not JSON: ") + e.what());
  }
  return InvalidArgument("the body is not JSON");
}

Status FillElements(const json& value, const std::string& where, HostTensor& t, int64_t* next) {
  return Fill(value, where, t, next, t.elements(), 0);
}

Status CountLeaves(const json& value, const std::string& where, int64_t* count) {
  *count = 0;
  return Count(value, where, count, 0);
}

json Flat(const HostTensor& t) {
  json a = json::array();
  int64_t n = t.elements();
  for (int64_t i = 0; i < n; ++i) a.push_back(Element(t, i));
  return a;
}

json Row(const HostTensor& t, int64_t row) {
  int64_t per_row = t.rows() ? t.elements() / t.rows() : 0;
  int64_t next = row * per_row;
  if (t.shape.size() <= 1) return Element(t, next);
  return Nested(t, 1, &next);
}

std::string Brief(const json& value) {
  std::string s = value.is_string()   ? "a string ("
                  : value.is_null()   ? "null"
                  : value.is_object() ? "an object"
                  : value.is_array()  ? "a list"
                                      : "";
  if (value.is_string()) {
    std::string text = value.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    s += text + ")";
  } else if (s.empty()) {
    s = value.dump();
  }
  return s;
}

}  // namespace cadre::serving::json_values
