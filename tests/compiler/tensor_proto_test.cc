#include "compiler/tensor_proto.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "compiler/onnx_proto_util.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

std::string Data(const std::string& name) {
  return std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/" + name;
}

Tensor Iota(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  auto* bytes = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  if (dtype == DType::kBool)
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  return t;
}

TEST(TensorProtoTest, FilesRoundTripEveryDType) {
  TempDir tmp;
  for (DType dt : {DType::kFloat32, DType::kUint8, DType::kInt8, DType::kUint16, DType::kInt16,
                   DType::kInt32, DType::kInt64, DType::kBool, DType::kFloat16, DType::kFloat64,
                   DType::kUint32, DType::kUint64, DType::kBFloat16}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    Tensor t = Iota(dt, {2, 3, 5});
    std::string path = tmp / (std::string(DTypeName(dt)) + ".pb");
    ASSERT_TRUE(WriteTensorFile(path, t, "x").ok());
    std::string name;
    auto back = ReadTensorFile(path, &name);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(name, "x");
    EXPECT_TRUE(back->BitwiseEqual(t));
  }
  auto scalar = ReadTensorFile(tmp / "f32.pb");
  ASSERT_TRUE(scalar.ok());
  Tensor s = Tensor::Scalar(2.5f);
  ASSERT_TRUE(WriteTensorFile(tmp / "scalar.pb", s, "").ok());
  auto back = ReadTensorFile(tmp / "scalar.pb");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->rank(), 0);
  EXPECT_EQ(back->data<float>()[0], 2.5f);
  Tensor empty(DType::kInt64, {0, 4});
  ASSERT_TRUE(WriteTensorFile(tmp / "empty.pb", empty, "e").ok());
  auto e = ReadTensorFile(tmp / "empty.pb");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->shape(), (Shape{0, 4}));
}

TEST(TensorProtoTest, ReadsTypedFieldsWrittenByOnnx) {
  std::string name;
  auto f = ReadTensorFile(Data("tensor_float_data.pb"), &name);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(name, "typed_f32");
  EXPECT_EQ(f->shape(), (Shape{2, 2}));
  EXPECT_EQ(f->data<float>()[2], 3.25f);
  auto b = ReadTensorFile(Data("tensor_int32_bool.pb"));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->dtype(), DType::kBool);
  EXPECT_EQ((std::vector<uint8_t>(b->data<uint8_t>(), b->data<uint8_t>() + 3)),
            (std::vector<uint8_t>{1, 0, 1}));
  auto r = ReadTensorFile(Data("tensor_raw_i64.pb"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ToInt64Vector(), (std::vector<int64_t>{-1, int64_t{1} << 40, 7}));
}

TEST(TensorProtoTest, ReadsOnnxBackendTestData) {
  std::string path = std::string(ONNX_NODE_TEST_DIR) + "/test_abs/test_data_set_0/input_0.pb";
  if (!fs::exists(path)) GTEST_SKIP() << "no ONNX backend test data at " << path;
  std::string name;
  auto t = ReadTensorFile(path, &name);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(name, "x");
  EXPECT_EQ(t->shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(t->dtype(), DType::kFloat32);
}

TEST(TensorProtoTest, FileErrors) {
  TempDir tmp;
  auto missing = ReadTensorFile(tmp / "none.pb");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "cannot open '" + tmp / "none.pb" + "': No such file or directory");
  std::ofstream(tmp / "empty.pb");
  auto empty = ReadTensorFile(tmp / "empty.pb");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(),
            "'" + tmp / "empty.pb" + "' is empty; expected a serialized ONNX TensorProto");
  std::ofstream(tmp / "junk.pb") << "\xff\xff\xff\xff";
  auto junk = ReadTensorFile(tmp / "junk.pb");
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().message(),
            "'" + tmp / "junk.pb" + "' is not an ONNX TensorProto file (protobuf parse failed)");
  Status st = WriteTensorFile(tmp / "no/such/dir.pb", Tensor::Scalar(1), "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "cannot write '" + tmp / "no/such/dir.pb" + "': No such file or directory");
}

TEST(TensorProtoTest, WritesAtomically) {
  TempDir tmp;
  std::string path = tmp / "t.pb";
  std::ofstream(path) << "old";
  ASSERT_TRUE(WriteTensorFile(path, Tensor::ScalarInt64(5), "t").ok());
  auto t = ReadTensorFile(path);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->GetAsInt64(0), 5);
  int files = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);  // no temporary left behind
}

onnx::TensorProto Proto(const std::string& name, int32_t dtype, std::vector<int64_t> dims) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(dtype);
  for (int64_t d : dims) p.add_dims(d);
  return p;
}

TEST(TensorProtoTest, MalformedProtosAreErrors) {
  auto expect_error = [](const onnx::TensorProto& p, const std::string& message) {
    auto t = TensorFromProto(p, "");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().message(), message);
  };
  onnx::TensorProto short_raw = Proto("w", onnx::TensorProto::FLOAT, {2, 3});
  short_raw.set_raw_data(std::string(20, '\0'));
  expect_error(short_raw,
               "initializer 'w': raw_data holds 20 bytes but dims [2,3] of f32 need 6 values "
               "(24 bytes)");
  onnx::TensorProto few = Proto("v", onnx::TensorProto::INT64, {3});
  few.add_int64_data(1);
  expect_error(few, "initializer 'v': holds 1 values but dims [3] of i64 need 3 values (24 bytes)");
  expect_error(Proto("n", onnx::TensorProto::FLOAT, {2, -1}),
               "initializer 'n' has a negative dimension [2,-1]");
  expect_error(Proto("s", onnx::TensorProto::STRING, {1}),
               "initializer 's' has element type STRING (8), which foundry does not support");
  expect_error(Proto("", 0, {1}), "tensor has no element type");
  expect_error(Proto("huge", onnx::TensorProto::FLOAT, {int64_t{1} << 40, int64_t{1} << 40}),
               "initializer 'huge' is too large [1099511627776,1099511627776]");
  // No data at all for a non-empty tensor.
  expect_error(Proto("nodata", onnx::TensorProto::FLOAT, {2}),
               "initializer 'nodata': holds 0 values but dims [2] of f32 need 2 values (8 bytes)");

  onnx::TensorProto ext = Proto("e", onnx::TensorProto::FLOAT, {2, 3});
  ext.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const std::string& k, const std::string& v) {
    auto* kv = ext.add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  };
  add("location", "../weights.bin");
  expect_error(ext,
               "initializer 'e': external data location '../weights.bin' must be a relative "
               "path inside the model's directory");
  ext.mutable_external_data(0)->set_value("weights.bin");
  add("offset", "16");
  add("length", "24");
  std::string dir = std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/external";
  auto ok = TensorFromProto(ext, dir);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->data<float>()[5], 2.5f);
  ext.mutable_external_data(1)->set_value("20");
  auto too_short = TensorFromProto(ext, dir);
  ASSERT_FALSE(too_short.ok());
  EXPECT_EQ(too_short.status().message(), "external data file '" + dir +
                                              "/weights.bin' for initializer 'e' is too short (40 "
                                              "bytes; needs 44)");
}

TEST(TensorProtoTest, ProtoRoundTrip) {
  Tensor t = Iota(DType::kFloat16, {4});
  onnx::TensorProto p;
  TensorToProto(t, "h", &p);
  EXPECT_EQ(p.name(), "h");
  EXPECT_EQ(p.data_type(), onnx::TensorProto::FLOAT16);
  auto back = TensorFromProto(p, "");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->BitwiseEqual(t));
  // 16-bit floats in int32_data are bit patterns.
  onnx::TensorProto typed = Proto("bits", onnx::TensorProto::FLOAT16, {2});
  typed.add_int32_data(0x3C00);  // 1.0
  typed.add_int32_data(0xC000);  // -2.0
  auto bits = TensorFromProto(typed, "");
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ(bits->data<uint16_t>()[0], 0x3C00);
  EXPECT_EQ(bits->data<uint16_t>()[1], 0xC000);
}

}  // namespace
}  // namespace foundry
