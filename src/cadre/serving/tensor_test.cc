#include "cadre/serving/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cadre/serving/fake_model.h"
#include "cadre/serving/signature.h"

namespace cadre::serving {
namespace {

using testing::Rows;

TEST(TensorTest, ConcatAndSliceRoundTrip) {
  HostTensor a = Rows({{1, 2}, {3, 4}}), b = Rows({{5, 6}});
  const HostTensor* parts[] = {&a, &b};
  HostTensor c = ConcatRows(parts);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{3, 2}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(ElementAsDouble(c, i), i + 1);
  HostTensor s = SliceRows(c, 2, 1);
  EXPECT_EQ(s.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ElementAsDouble(s, 1), 6);
  EXPECT_THROW(SliceRows(c, 2, 2), std::out_of_range);
  HostTensor wide = Rows({{1, 2, 3}});
  const HostTensor* bad[] = {&a, &wide};
  EXPECT_THROW(ConcatRows(bad), std::invalid_argument);
}

TEST(TensorTest, HalfAndBfloat16RoundToNearest) {
  for (DataType type : {DataType::kFp16, DataType::kBf16}) {
    HostTensor t{type, {6}, std::vector<std::byte>(12)};
    const double in[] = {1.0, -2.5, 0.0, 65504.0, std::numeric_limits<double>::infinity(), 1e-7};
    for (int i = 0; i < 6; ++i) SetElementFromDouble(t, i, in[i]);
    EXPECT_EQ(ElementAsDouble(t, 0), 1.0);
    EXPECT_EQ(ElementAsDouble(t, 1), -2.5);
    EXPECT_EQ(ElementAsDouble(t, 2), 0.0);
    EXPECT_TRUE(std::isinf(ElementAsDouble(t, 4)));
    EXPECT_NEAR(ElementAsDouble(t, 5), 1e-7, type == DataType::kFp16 ? 6e-8 : 1e-9);
    SetElementFromDouble(t, 0, std::nan(""));
    EXPECT_TRUE(std::isnan(ElementAsDouble(t, 0)));
  }
  HostTensor h{DataType::kFp16, {1}, std::vector<std::byte>(2)};
  SetElementFromDouble(h, 0, 65504.0);
  EXPECT_EQ(ElementAsDouble(h, 0), 65504.0);
  SetElementFromDouble(h, 0, 1.0 + 1.0 / 4096);  // halfway between 1 and 1+2^-10: even (1)
  EXPECT_EQ(ElementAsDouble(h, 0), 1.0);
}

TEST(TensorTest, NumElementsRefusesOverflowAndNegatives) {
  std::vector<int64_t> huge = {1 << 30, 1 << 30, 1 << 30};
  EXPECT_FALSE(NumElements(huge).has_value());
  std::vector<int64_t> negative = {2, -1};
  EXPECT_FALSE(NumElements(negative).has_value());
  std::vector<int64_t> ok = {2, 3, 0};
  EXPECT_EQ(NumElements(ok), 0);
  std::vector<int64_t> capped = {10, 10};
  EXPECT_FALSE(NumElements(capped, 99).has_value());
}

TEST(SignatureTest, ParsesWhatSaveModelWrites) {
  ModelSignature sig;
  ASSERT_TRUE(ParseSignature(R"({"format": "cadre-model/1", "model_file": "model.pt",
      "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
      "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 3]}],
      "labels": ["a", "b", "c"]})",
                             &sig)
                  .ok());
  EXPECT_EQ(sig.inputs[0].row_elements(), 784);
  EXPECT_EQ(sig.outputs[0].shape, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(sig.labels.size(), 3u);
}

TEST(SignatureTest, ErrorsNameTheField) {
  auto error = [](const std::string& text) {
    ModelSignature sig;
    Status s = ParseSignature(text, &sig);
    EXPECT_FALSE(s.ok()) << text;
    return s.message();
  };
  const std::string out = R"("outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}])";
  EXPECT_EQ(error("[1]"), "not a JSON object");
  EXPECT_NE(error("{" + out + "}").find("inputs: expected"), std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "datatype": "FP31", "shape": [-1]}],)" + out + "}")
                .find("inputs[0].datatype"),
            std::string::npos);
  EXPECT_NE(
      error(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, -2]}],)" + out + "}")
          .find("inputs[0].shape"),
      std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1]},
                                  {"name": "x", "datatype": "FP32", "shape": [-1]}],)" +
                  out + "}")
                .find("appears twice"),
            std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1]}],)" + out +
                  R"(, "labels": ["only one"]})")
                .find("labels: 1 labels"),
            std::string::npos);
  EXPECT_NE(error(R"({"model_file": "../x", "inputs": [{"name": "x", "datatype": "FP32",
                      "shape": [-1]}],)" +
                  out + "}")
                .find("model_file"),
            std::string::npos);
}

TEST(SignatureTest, HugeNegativeAndOverflowingShapesAreRefusedAtLoad) {
  // Each would have been a crash, a wrapped dimension, or a giant allocation when the model is
  // tried on one row at load.
  auto error = [](const std::string& shape, const std::string& field = "inputs") {
    const std::string x = R"({"name": "x", "datatype": "FP64", "shape": )" + shape + "}";
    const std::string y = R"({"name": "y", "datatype": "FP32", "shape": [-1, 2]})";
    ModelSignature sig;
    Status s = ParseSignature(R"({"inputs": [)" + (field == "inputs" ? x : y) +
                                  R"(], "outputs": [)" + (field == "inputs" ? y : x) + "]}",
                              &sig);
    EXPECT_FALSE(s.ok()) << shape;
    return s.message();
  };
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  // 2^64 - 1 was read as -1 (any size), 2^63 - 1 as itself.
  EXPECT_PRED2(has, error("[-1, 18446744073709551615]"),
               "inputs[0].shape[1]: 18446744073709551615");
  EXPECT_PRED2(has, error("[-1, 9223372036854775807]"), "inputs[0].shape[1]");
  EXPECT_PRED2(has, error("[-1, -7]"), "inputs[0].shape[1]: -7; dimensions are -1");
  EXPECT_PRED2(has, error("[-1, 1e3]"), "inputs[0].shape[1]: 1000.0");
  EXPECT_PRED2(has, error("[-1, \"4\"]"), "inputs[0].shape[1]: \"4\"");
  // Each dimension allowed, their product not (it overflowed int64 before).
  EXPECT_PRED2(has, error("[-1, 1073741824, 1073741824, 1073741824]"),
               "inputs[0].shape [-1, 1073741824, 1073741824, 1073741824]: one row is over 1024 "
               "MiB of FP64");
  EXPECT_PRED2(has, error("[-1, 65536, 65536]", "outputs"), "outputs[0].shape");
  std::string many = "[-1";
  for (int i = 1; i < 100; ++i) many += ", 1";
  EXPECT_PRED2(has, error(many + "]"), "inputs[0].shape: 100 dimensions");
  // The largest row allowed, and free dimensions, parse.
  ModelSignature sig;
  EXPECT_TRUE(ParseSignature(R"({"inputs": [{"name": "x", "datatype": "UINT8",
      "shape": [-1, 1024, -1, 1048576]}], "outputs": [{"name": "y", "datatype": "FP32",
      "shape": [-1, 0]}]})",
                             &sig)
                  .ok());
}

}  // namespace
}  // namespace cadre::serving
