#include "cadre/serving/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cadre/serving/fake_model.h"

namespace cadre::serving {
namespace {

using nlohmann::json;
using testing::FakeSignature;
using testing::Rows;

std::string V2Error(const std::string& body, const ModelSignature& sig = FakeSignature(3)) {
  V2Request req;
  Status s = DecodeV2Request(body, sig, &req);
  EXPECT_FALSE(s.ok()) << body;
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  return s.message();
}

std::string WmlError(const std::string& body, const ModelSignature& sig = FakeSignature(3)) {
  WmlRequest req;
  Status s = DecodeWmlRequest(body, sig, &req);
  EXPECT_FALSE(s.ok()) << body;
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  return s.message();
}

#define EXPECT_MENTIONS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(CodecV2Test, DecodesFlatAndNestedData) {
  for (const char* data : {"[1, 2, 3, 4, 5, 6]", "[[1, 2, 3], [4, 5, 6]]"}) {
    V2Request req;
    std::string body = std::string(R"({"id": "r1", "inputs": [{"name": "x", "shape": [2, 3],
        "datatype": "FP32", "data": )") +
                       data + "}]}";
    ASSERT_TRUE(DecodeV2Request(body, FakeSignature(3), &req).ok());
    EXPECT_EQ(req.id, "r1");
    ASSERT_EQ(req.inputs.size(), 1u);
    EXPECT_EQ(req.inputs[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(ElementAsDouble(req.inputs[0], 5), 6);
    EXPECT_EQ(req.outputs, std::vector<size_t>{0});
  }
}

TEST(CodecV2Test, EncodesTheAnswer) {
  V2Request req;
  req.id = "r9";
  req.outputs = {0};
  json doc = json::parse(EncodeV2Response("m", req, FakeSignature(2), {Rows({{1.5f, -2}})}));
  EXPECT_EQ(doc["model_name"], "m");
  EXPECT_EQ(doc["id"], "r9");
  EXPECT_EQ(doc["outputs"][0]["name"], "y");
  EXPECT_EQ(doc["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(doc["outputs"][0]["shape"], json({1, 2}));
  EXPECT_EQ(doc["outputs"][0]["data"], json({1.5, -2.0}));
}

TEST(CodecV2Test, NonFiniteNumbersAreNumbers) {
  V2Request req;
  std::string body = R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
      "data": [NaN, Infinity, "-inf"]}]})";
  ASSERT_TRUE(DecodeV2Request(body, FakeSignature(3), &req).ok());
  EXPECT_TRUE(std::isnan(ElementAsDouble(req.inputs[0], 0)));
  EXPECT_EQ(ElementAsDouble(req.inputs[0], 1), INFINITY);
  EXPECT_EQ(ElementAsDouble(req.inputs[0], 2), -INFINITY);
  // "NaN" inside a string that is not a value stays a string.
  EXPECT_MENTIONS(V2Error(R"({"id": "NaN Infinity", "inputs": [{"name": "x", "shape": [1, 3],
      "datatype": "FP32", "data": ["NaNa", 1, 2]}]})"),
                  "a string (\"NaNa\")");
}

TEST(CodecV2Test, BadRequestsNameTheField) {
  const std::string x = R"({"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]})";
  EXPECT_MENTIONS(V2Error("not json"), "not JSON");
  EXPECT_MENTIONS(V2Error("[]"), "JSON object");
  EXPECT_MENTIONS(V2Error("{}"), "inputs: missing");
  EXPECT_MENTIONS(V2Error(R"({"inputs": []})"), "input 'x' is missing");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "z"}]})"), "no input 'z'; it takes 'x'");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [)" + x + "," + x + "]}"), "given twice");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
      "data": [1, 2, 3, 4]}]})"),
                  "inputs[0] ('x').shape [1, 4] differs at dimension 1; the "
                  "model expects [-1, 3]");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]})"),
                  "inputs[0] ('x').shape: missing; the model expects [-1, 3]");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": "1,3", "datatype": "FP32",
      "data": [1, 2, 3]}]})"),
                  ".shape: a list of dimensions, not a string (\"1,3\")");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32",
      "data": [1, 2, 3]}]})"),
                  "has 1 dimensions; the model expects [-1, 3]");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "INT64",
      "data": [1, 2, 3]}]})"),
                  "datatype: INT64 given; the model expects FP32");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [0, 3], "datatype": "FP32",
      "data": []}]})"),
                  "empty batch");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
      "data": [1, 2, 3]}]})"),
                  "3 values for shape [2, 3], which holds 6");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
      "data": [1, 2, 3, 4]}]})"),
                  "4 values for shape [1, 3], which holds 3");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
      "data": [1, "two", 3]}]})"),
                  "element 1 is a string (\"two\"); FP32 numbers belong here");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
      "data": [1, null, {}]}]})"),
                  "element 1 is null");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [4000000000, 3],
      "datatype": "FP32", "data": []}]})"),
                  "0 values for shape [4000000000, 3], which holds 12000000000");
  // Too few values name the count, not the body's size.
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1000, 3], "datatype": "FP32",
      "data": [1, 2]}]})"),
                  "inputs[0] ('x').data: 2 values for shape [1000, 3], which holds 3000");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [4611686018427387904, 3],
      "datatype": "FP32", "data": [1]}]})"),
                  "which holds more than 2^63");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [)" + x + R"(], "outputs": [{"name": "q"}]})"),
                  "outputs[0].name: the model has no output 'q'");
  std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
      "data": )" + deep + "}]}"),
                  "nested too deeply");
}

TEST(CodecV2Test, NestedDataMustFollowTheShape) {
  // The protocol takes data flat or nested as the shape; any other nesting is refused, naming
  // the list at fault, rather than flattened.
  for (const char* data : {"[[1, 1], [1, 1]]", "[1, [1, 1], 1]"}) {
    EXPECT_MENTIONS(V2Error(std::string(R"({"inputs": [{"name": "x", "shape": [1, 4],
        "datatype": "FP32", "data": )") +
                                data + "}]}",
                            FakeSignature(4)),
                    "inputs[0] ('x').data: a list of ");
  }
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32",
      "data": [[1, 1], [1, 1, 1]]}]})",
                          FakeSignature(2)),
                  "inputs[0] ('x').data[1]: a list of 3 where the shape has 2 at dimension 1");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32",
      "data": [[1, 1], [1, [1]]]}]})",
                          FakeSignature(2)),
                  "inputs[0] ('x').data[1][1]: a list where the shape has a single value");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32",
      "data": [[1, 1], 1]}]})",
                          FakeSignature(2)),
                  "inputs[0] ('x').data[1]: 1 where the shape has a list of 2 (dimension 1)");
  V2Request req;
  EXPECT_TRUE(DecodeV2Request(R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
      "data": [[1, 2, 3, 4]]}]})",
                              FakeSignature(4), &req)
                  .ok());
}

TEST(CodecV2Test, BooleansOnlyForBool) {
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
      "data": [1, true, 0]}]})"),
                  "inputs[0] ('x').data: element 1 is true; FP32 numbers belong here");
  ModelSignature sig;
  sig.inputs = {{"mask", DataType::kBool, {-1, 2}}, {"ids", DataType::kInt64, {-1, 1}}};
  sig.outputs = {{"y", DataType::kFp32, {-1}}};
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "mask", "shape": [1, 2], "datatype": "BOOL",
      "data": [true, false]}, {"name": "ids", "shape": [1, 1], "datatype": "INT64",
      "data": [false]}]})",
                          sig),
                  "inputs[1] ('ids').data: element 0 is false; INT64 numbers belong here");
  V2Request req;
  ASSERT_TRUE(DecodeV2Request(R"({"inputs": [{"name": "mask", "shape": [1, 2],
      "datatype": "BOOL", "data": [true, false]}, {"name": "ids", "shape": [1, 1],
      "datatype": "INT64", "data": [7]}]})",
                              sig, &req)
                  .ok());
  EXPECT_EQ(ElementAsInt(req.inputs[0], 0), 1);
  EXPECT_EQ(ElementAsInt(req.inputs[0], 1), 0);
}

TEST(CodecV2Test, MinusOneInARequestShapeIsExplained) {
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [-1, 3], "datatype": "FP32",
      "data": [1, 2, 3]}]})"),
                  "inputs[0] ('x').shape [-1, 3] has -1 at dimension 0: a request gives the "
                  "actual size of every dimension");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "x", "shape": [-1, 3], "datatype": "FP32",
      "data": [1, 2, 3]}]})"),
                  "-1 appears only in the model's shape [-1, 3]");
}

TEST(CodecV2Test, IntegersAreCheckedForRange) {
  ModelSignature sig;
  sig.inputs = {{"ids", DataType::kUint8, {-1, 2}}};
  sig.outputs = {{"y", DataType::kFp32, {-1}}};
  V2Request req;
  ASSERT_TRUE(DecodeV2Request(R"({"inputs": [{"name": "ids", "shape": [1, 2],
      "datatype": "UINT8", "data": [255, 7.0]}]})",
                              sig, &req)
                  .ok());
  EXPECT_EQ(ElementAsInt(req.inputs[0], 0), 255);
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "ids", "shape": [1, 2], "datatype": "UINT8",
      "data": [256, 1]}]})",
                          sig),
                  "(256) is out of range for UINT8");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "ids", "shape": [1, 2], "datatype": "UINT8",
      "data": [1.5, 1]}]})",
                          sig),
                  "whole numbers");
  EXPECT_MENTIONS(V2Error(R"({"inputs": [{"name": "ids", "shape": [1, 2], "datatype": "UINT8",
      "data": [NaN, 1]}]})",
                          sig),
                  "UINT8 numbers belong here");
}

TEST(CodecWmlTest, FieldsNamingTheInputOrItsFeatures) {
  ModelSignature sig = FakeSignature(3);
  WmlRequest req;
  ASSERT_TRUE(DecodeWmlRequest(R"({"input_data": [{"fields": ["x"],
      "values": [[[1, 2, 3]], [[4, 5, 6]]]}]})",
                               sig, &req)
                  .ok());
  ASSERT_EQ(req.groups.size(), 1u);
  EXPECT_EQ(req.groups[0][0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ElementAsDouble(req.groups[0][0], 4), 5);
  ASSERT_TRUE(DecodeWmlRequest(R"({"input_data": [{"fields": ["a", "b", "c"],
      "values": [[1, 2, 3]]}, {"values": [[[7, 8, 9]]]}]})",
                               sig, &req)
                  .ok());
  ASSERT_EQ(req.groups.size(), 2u);
  EXPECT_EQ(ElementAsDouble(req.groups[0][0], 2), 3);
  EXPECT_EQ(ElementAsDouble(req.groups[1][0], 0), 7);
}

TEST(CodecWmlTest, ManyShortRowsAreRefusedAtTheFirstWithoutAllocatingTheBatch) {
  // 4 MiB a row: 100000 rows of one number each would claim 400 GB before any row was read.
  ModelSignature sig;
  sig.inputs = {{"x", DataType::kFp32, {-1, 1 << 20}}};
  sig.outputs = {{"y", DataType::kFp32, {-1}}};
  std::string values;
  for (int r = 0; r < 100000; ++r) values += r ? ",[0]" : "[0]";
  EXPECT_MENTIONS(
      WmlError(R"({"input_data": [{"fields": ["x"], "values": [)" + values + "]}]}", sig),
      "input_data[0].values[0][0] ('x'): 1 values; one row of 'x' has shape "
      "[1048576]");
}

TEST(CodecWmlTest, AnswersWithLabels) {
  ModelSignature sig = FakeSignature(3, {"cat", "dog", "eel"});
  json doc = json::parse(EncodeWmlResponse(sig, {{Rows({{0.1f, 0.7f, 0.2f}, {5, 1, 2}})}}));
  EXPECT_EQ(doc["predictions"][0]["fields"], json({"prediction", "y"}));
  EXPECT_EQ(doc["predictions"][0]["values"][0][0], "dog");
  EXPECT_EQ(doc["predictions"][0]["values"][1][0], "cat");
  EXPECT_EQ(doc["predictions"][0]["values"][1][1], json({5.0, 1.0, 2.0}));
  // As torch.argmax: a NaN score is the highest, the first of equal ones wins.
  doc = json::parse(EncodeWmlResponse(sig, {{Rows({{1, NAN, 3}, {NAN, 9, NAN}, {2, 7, 7}})}}));
  EXPECT_EQ(doc["predictions"][0]["values"][0][0], "dog");
  EXPECT_EQ(doc["predictions"][0]["values"][1][0], "cat");
  EXPECT_EQ(doc["predictions"][0]["values"][2][0], "dog");
}

TEST(CodecWmlTest, BadPayloadsNameTheField) {
  EXPECT_MENTIONS(WmlError(R"({"values": [[1, 2, 3]]})"), "input_data: missing");
  EXPECT_MENTIONS(WmlError(R"({"input_data": []})"), "non-empty list");
  EXPECT_MENTIONS(WmlError(R"({"input_data": [{"fields": ["x"], "values": []}]})"),
                  "input_data[0].values: an empty batch");
  EXPECT_MENTIONS(WmlError(R"({"input_data": [{"fields": ["x"]}]})"), "values: missing");
  EXPECT_MENTIONS(WmlError(R"({"input_data": [{"fields": ["p", "q"], "values": [[1, 2]]}]})"),
                  "do not match the model's inputs; expected the fields [x [-1, 3]], or 3 "
                  "feature fields");
  EXPECT_MENTIONS(WmlError(R"({"input_data": [{"fields": ["x"], "values": [[[1, 2]]]}]})"),
                  "input_data[0].values[0][0] ('x'): 2 values; one row of 'x' has shape [3]");
  EXPECT_MENTIONS(WmlError(R"({"input_data": [{"fields": ["a", "b", "c"],
      "values": [[1, 2, 3], [1, 2]]}]})"),
                  "values[1]: expected a row of 3 values");
  EXPECT_MENTIONS(WmlError(R"({"input_data": [{"fields": ["a", "b", "c"],
      "values": [[1, "x", 3]]}]})"),
                  "a string (\"x\"); FP32 numbers belong here");
}

}  // namespace
}  // namespace cadre::serving
