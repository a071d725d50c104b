// JSON helpers shared by the codecs (internal to serving/): parsing with Python's NaN and
// Infinity, tensor elements from JSON values, tensors to JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cadre/base/status.h"
#include "cadre/serving/tensor.h"

namespace cadre::serving::json_values {

// Parses `body`; bare NaN, Infinity and -Infinity outside strings (Python's json.dumps writes
// them) are read as the strings "NaN", "Infinity", "-Infinity", which FillElements accepts.
Status Parse(std::string_view body, nlohmann::json* doc);

// Writes the leaves of `value` (a number, a boolean for BOOL only, or arrays of them nested to
// any depth, in row-major order) into `t` from element *next on, converting to t.dtype; advances
// *next. Fails, naming `where`, on a leaf that is not a number of the right kind, or when there are
// more leaves than `t` has elements.
Status FillElements(const nlohmann::json& value, const std::string& where, HostTensor& t,
                    int64_t* next);

// The number of leaves (values that are not arrays) of `value`, arrays nested to any depth up to
// the limit FillElements takes: what a tensor of them would hold, known before it is allocated.
Status CountLeaves(const nlohmann::json& value, const std::string& where, int64_t* count);

// All of `t`'s elements as a flat JSON array.
nlohmann::json Flat(const HostTensor& t);
// Row `row` of `t` as nested arrays of the row's shape (a number for a row of one element of
// rank-1 tensors).
nlohmann::json Row(const HostTensor& t, int64_t row);

// A JSON value for error messages: short and on one line.
std::string Brief(const nlohmann::json& value);

}  // namespace cadre::serving::json_values
