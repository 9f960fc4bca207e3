// runtime/safetensors.h: the writer against the bytes Hugging Face's own implementation writes,
// bitwise round trips, header padding, one exact message per malformed file, the PyTorch names of
// a plan's parameters, and LoadSafetensorsInto's checks and widening.
#include "runtime/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "base/bfloat16.h"
#include "compiler/import_context.h"
#include "tests/support/exec.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// A file: the u64 length of `header`, `header`, then `data`.
std::string FileBytes(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(s.data(), &n, 8);
  return s + header + data;
}

std::string Message(const std::string& bytes) {
  StatusOr<SafetensorsFile> f = ParseSafetensors(bytes, "w.safetensors");
  return f.ok() ? "(ok)" : f.status().message();
}

// The message for a bad header followed by `data_bytes` zero bytes.
std::string HeaderMessage(const std::string& header, size_t data_bytes = 0) {
  return Message(FileBytes(header, std::string(data_bytes, '\0')));
}

const std::string kBad = "'w.safetensors' is not a valid safetensors file: ";

// bindings/python/tests/test_simple.py (test_serialization) in huggingface/safetensors: what
// `save({"test": np.zeros((2, 2), dtype=np.int32)})` returns, byte for byte: the header padded
// with spaces to 64 bytes, then 16 zero bytes.
TEST(SafetensorsTest, WritesTheBytesTheReferenceImplementationWrites) {
  TempDir dir;
  Tensor zeros(DType::kInt32, {2, 2});
  ASSERT_TRUE(WriteSafetensors(dir / "t.safetensors", {{"test", &zeros}}, {}).ok());
  const std::string expected = std::string("@\0\0\0\0\0\0\0", 8) +
                               R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})" +
                               "    " + std::string(16, '\0');
  EXPECT_EQ(ReadWholeFile(dir / "t.safetensors"), expected);
  StatusOr<SafetensorsFile> back = ParseSafetensors(expected, "reference");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->tensors.at("test").BitwiseEqual(zeros));
}

TEST(SafetensorsTest, RoundTripIsBitwiseAndPadsTheHeaderTo8) {
  TempDir dir;
  Tensor f32 = RandomTensor({3, 5}, 1);
  f32.data<float>()[0] = -0.0f;
  f32.data<float>()[1] = std::nanf("0x123");
  f32.data<float>()[2] = -INFINITY;
  Tensor bf16(DType::kBFloat16, {7});
  for (int i = 0; i < 7; ++i) bf16.data<uint16_t>()[i] = static_cast<uint16_t>(0x3F80 + 977 * i);
  Tensor i64 = Tensor::FromVector<int64_t>(DType::kInt64, {2, 2}, {INT64_MIN, -1, 0, INT64_MAX});
  Tensor empty(DType::kFloat32, {0, 4});
  Tensor scalar = Tensor::Scalar(2.5f);
  for (const std::string& meta_value : {"", "x", "xy", "abc", "abcdefgh"}) {
    std::map<std::string, std::string> meta;
    if (!meta_value.empty()) meta = {{"format", "pt"}, {"k", meta_value}};
    const std::string path = dir / "t.safetensors";
    ASSERT_TRUE(WriteSafetensors(path,
                                 {{"w.f32", &f32},
                                  {"bf16", &bf16},
                                  {"a/b i64", &i64},
                                  {"empty", &empty},
                                  {"scalar", &scalar}},
                                 meta)
                    .ok());
    const std::string bytes = ReadWholeFile(path);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u) << meta_value;
    EXPECT_EQ(bytes.size(), 8 + n + f32.nbytes() + bf16.nbytes() + i64.nbytes() + 4);
    EXPECT_NE(bytes[8 + n - 1], ' ' - 1);  // padded with spaces, if at all, after the '}'
    EXPECT_EQ(bytes.substr(8, n).find_last_not_of(' '), bytes.substr(8, n).rfind('}'));
    StatusOr<SafetensorsFile> back = ReadSafetensors(path);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->metadata, meta);
    ASSERT_EQ(back->tensors.size(), 5u);
    EXPECT_TRUE(back->tensors.at("w.f32").BitwiseEqual(f32));
    EXPECT_TRUE(back->tensors.at("bf16").BitwiseEqual(bf16));
    EXPECT_TRUE(back->tensors.at("a/b i64").BitwiseEqual(i64));
    EXPECT_EQ(back->tensors.at("empty").shape(), (Shape{0, 4}));
    EXPECT_EQ(back->tensors.at("scalar").shape(), Shape{});
    EXPECT_EQ(back->tensors.at("scalar").data<float>()[0], 2.5f);
  }
}

TEST(SafetensorsTest, WriteRefusesWhatTheFormatCannotHold) {
  TempDir dir;
  Tensor t(DType::kFloat32, {1});
  const std::string path = dir / "t.safetensors";
  EXPECT_EQ(WriteSafetensors(path, {{"a", &t}, {"a", &t}}, {}).message(),
            "cannot write '" + path + "': the tensor name 'a' appears twice");
  EXPECT_EQ(WriteSafetensors(path, {{"__metadata__", &t}}, {}).message(),
            "cannot write '" + path + "': the tensor name '__metadata__' is reserved");
  EXPECT_EQ(WriteSafetensors(path, {{"a\xff", &t}}, {}).message(),
            "cannot write '" + path + "': a tensor name or metadata string is not valid UTF-8");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsTest, EveryMalformedFileIsOneLineNamingTheProblem) {
  const std::string f4 = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_EQ(Message("abcd"), kBad + "it is 4 bytes, shorter than the 8-byte header length");
  EXPECT_EQ(Message(FileBytes("", "")),
            kBad + "the header does not begin with '{' (it is not JSON)");
  std::string huge(8, '\0');
  const uint64_t n = 100'000'001;
  std::memcpy(huge.data(), &n, 8);
  EXPECT_EQ(Message(huge + "{}"),
            kBad + "the header length 100000001 is over the limit of 100000000 bytes");
  std::string wrapped(8, '\xff');
  EXPECT_EQ(Message(wrapped + "{}"), kBad +
                                         "the header length 18446744073709551615 is over the "
                                         "limit of 100000000 bytes");
  std::string longer = FileBytes("{}", "");
  longer[0] = 100;
  EXPECT_EQ(Message(longer), kBad + "the header length 100 is more than the 2 bytes after it");
  EXPECT_EQ(HeaderMessage(" {}"), kBad + "the header does not begin with '{' (it is not JSON)");
  EXPECT_EQ(HeaderMessage(R"({"a": )"),
            kBad +
                "the header is not valid JSON (parse error at line 1, column 7: syntax error "
                "while parsing value - unexpected end of input; expected '[', '{', or a literal)");
  EXPECT_EQ(HeaderMessage("{\"a\n\x01\": 1}"),
            kBad +
                "the header is not valid JSON (parse error at line 2, column 0: syntax error "
                "while parsing object key - invalid string: control character U+000A (LF) must "
                "be escaped to \\\\u000A or \\\\n; last read: '\"a<U+000A>'; expected string "
                "literal)");
  EXPECT_EQ(HeaderMessage("{\"\xff\": 1}"),
            kBad +
                "the header is not valid JSON (parse error at line 1, column 3: syntax error "
                "while parsing object key - invalid string: ill-formed UTF-8 byte; last read: "
                "'\"\\xff'; expected string literal)");
  EXPECT_EQ(HeaderMessage(R"({"a":)" + f4 + R"(,"b":{},"a":)" + f4 + "}", 4),
            kBad + "the header names 'a' twice");
  EXPECT_EQ(HeaderMessage(R"({"a":1})"), kBad + "tensor 'a' is 1, not an object");
  EXPECT_EQ(HeaderMessage(R"({"a\nb":[1]})"), kBad + "tensor 'a\\x0ab' is [1], not an object");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[1]}})"),
            kBad + "tensor 'a' has no \"data_offsets\"");
  EXPECT_EQ(HeaderMessage(R"({"a":{"shape":[1],"data_offsets":[0,4]}})"),
            kBad + "tensor 'a' has no \"dtype\"");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})"),
            kBad + "tensor 'a' has dtype 5, not a string");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1),
            kBad +
                "tensor 'a' has dtype \"F8_E4M3\", which foundry does not read (F32, F16, "
                "BF16, F64, I64, I32, I16, I8, U8, U16, U32, U64, BOOL)");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4),
            kBad + "tensor 'a' has shape 4, not an array");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
            kBad + "tensor 'a' has shape [-1]: -1 is not a dimension (a whole number >= 0)");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
            kBad + "tensor 'a' has shape [1.0]: 1.0 is not a dimension (a whole number >= 0)");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
            kBad + "tensor 'a' has data_offsets [0], not [begin, end] (whole numbers >= 0)");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4),
            kBad + "tensor 'a' has data_offsets [0,\"4\"], not [begin, end] (whole numbers >= 0)");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
            kBad + "tensor 'a' has data_offsets [4,0]: end is before begin");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,4]}})", 4),
            kBad + "tensor 'a' is F32[2,3] (24 bytes) but its data_offsets [0,4] span 4 bytes");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
                          R"("data_offsets":[0,4]}})",
                          4),
            kBad + "tensor 'a': f32[4294967296,4294967296] needs more than " +
                std::to_string(INT64_MAX) +
                " bytes; one tensor may hold at most 1099511627776 (1 TiB)");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          12),
            kBad + "the data_offsets [4, 12] of tensor 'b' overlap bytes 4..8 of another tensor");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                          16),
            kBad + "the data_offsets [12, 16] of tensor 'b' leave bytes 8..12 unused");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
            kBad + "the data_offsets [4, 8] of tensor 'a' leave bytes 0..4 unused");
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
            kBad + "the data_offsets [0, 16] of tensor 'a' run past the end of the data (8 bytes)");
  EXPECT_EQ(HeaderMessage(R"({"a":)" + f4 + "}", 12),
            kBad + "the tensors cover 4 of the 12 data bytes after the header");
  EXPECT_EQ(HeaderMessage("{}", 1),
            kBad + "the tensors cover 0 of the 1 data bytes after the header");
  EXPECT_EQ(HeaderMessage(R"({"__metadata__":[]})"), kBad + "__metadata__ is [], not an object");
  EXPECT_EQ(HeaderMessage(R"({"__metadata__":{"step":3}})"),
            kBad + "__metadata__ entry 'step' is 3, not a string");
  EXPECT_EQ(HeaderMessage("[" + std::string(1000000, '[')),
            kBad + "the header does not begin with '{' (it is not JSON)");
  // Nested a million deep: a parse error, not a stack overflow.
  EXPECT_EQ(HeaderMessage(R"({"a":)" + std::string(1000000, '[')).substr(0, kBad.size() + 30),
            kBad + "the header is not valid JSON (");
  // A valid header whose shape is nested 10,000 deep: described, never dumped (dump() recurses).
  EXPECT_EQ(HeaderMessage(R"({"a":{"dtype":"F32","shape":)" + std::string(10000, '[') +
                          std::string(10000, ']') + R"(,"data_offsets":[0,4]}})"),
            kBad +
                "tensor 'a' has shape an array of 1 values holding arrays or objects: an array "
                "of 1 values holding arrays or objects is not a dimension (a whole number >= 0)");
  // Valid: empty, zero-size tensors anywhere, two at the same offset, padding spaces.
  EXPECT_EQ(HeaderMessage("{}"), "(ok)");
  EXPECT_EQ(HeaderMessage(R"({"e":{"dtype":"BOOL","shape":[0,3],"data_offsets":[4,4]},"a":)" + f4 +
                              R"(,"z":{"dtype":"I8","shape":[0],"data_offsets":[0,0]}}  )",
                          4),
            "(ok)");
}

TEST(SafetensorsTest, ReadingAFileChecksItToo) {
  TempDir dir;
  EXPECT_EQ(ReadSafetensors(dir / "none").status().message(),
            "cannot open '" + (dir / "none") + "': No such file or directory");
  EXPECT_EQ(ReadSafetensors(dir.str()).status().message(),
            "cannot read '" + dir.str() + "': it is not a file");
  const std::string f4 = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string full = FileBytes(f4, "abcd");
  for (size_t cut : {size_t{0}, size_t{5}, size_t{8}, size_t{30}, full.size() - 1}) {
    const std::string path = dir.File("cut" + std::to_string(cut), full.substr(0, cut));
    StatusOr<SafetensorsFile> f = ReadSafetensors(path);
    ASSERT_FALSE(f.ok()) << cut;
    EXPECT_EQ(f.status().message(), Message(full.substr(0, cut)).replace(1, 13, path)) << cut;
  }
  StatusOr<SafetensorsFile> f = ReadSafetensors(dir.File("ok", full));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(std::memcmp(f->tensors.at("a").raw(), "abcd", 4), 0);
}

Graph GraphWithParameters(const std::vector<std::string>& names) {
  Graph g;
  g.parameters = names;
  return g;
}

TEST(SafetensorsTest, TorchNamesAreTheStateDictKeysWhereTheyCanBeKnown) {
  Graph g = GraphWithParameters({"transformer.blocks.0.attn.Wqkv.weight", "onnx::MatMul_123",
                                 "p_lm_head_weight", "p_other", "/wte/Gather_output_0", "a..b"});
  g.metadata[import_internal::kGraphSignatureKey] =
      "\n# inputs\np_lm_head_weight: PARAMETER target='lm_head.weight'\n"
      "b_mask: BUFFER target='mask' persistent=True\ninput_ids: USER_INPUT\n";
  TorchNames names = MapTorchNames(g, g.parameters);
  EXPECT_EQ(names.torch_name.at("transformer.blocks.0.attn.Wqkv.weight"),
            "transformer.blocks.0.attn.Wqkv.weight");
  EXPECT_EQ(names.torch_name.at("p_lm_head_weight"), "lm_head.weight");
  EXPECT_EQ(names.torch_name.at("p_other"), "p_other");  // not in the signature: as it is
  EXPECT_EQ(names.torch_name.at("onnx::MatMul_123"), "onnx::MatMul_123");
  EXPECT_EQ(names.unmapped,
            (std::vector<std::string>{"onnx::MatMul_123", "/wte/Gather_output_0", "a..b"}));
  // Two parameters cannot both take a name: the second keeps its own.
  Graph clash = GraphWithParameters({"lm_head.weight", "p_lm_head_weight"});
  clash.metadata = g.metadata;
  names = MapTorchNames(clash, clash.parameters);
  EXPECT_EQ(names.torch_name.at("p_lm_head_weight"), "p_lm_head_weight");
  EXPECT_EQ(names.unmapped, std::vector<std::string>{"p_lm_head_weight"});
}

// IEEE half to float, against the compiler's own conversion (GCC's _Float16), every bit pattern.
TEST(SafetensorsTest, F16AndBf16AreWidenedExactly) {
  TempDir dir;
  Tensor f16(DType::kFloat16, {65536}), bf16(DType::kBFloat16, {65536});
  for (int i = 0; i < 65536; ++i) {
    f16.data<uint16_t>()[i] = static_cast<uint16_t>(i);
    bf16.data<uint16_t>()[i] = static_cast<uint16_t>(i);
  }
  Graph g = GraphWithParameters({"h", "b"});
  const std::string path = dir / "w.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"h", &f16}, {"b", &bf16}}, {}).ok());
  std::map<std::string, Tensor> params;
  params["h"] = Tensor(DType::kFloat32, {65536});
  params["b"] = Tensor(DType::kFloat32, {65536});
  ASSERT_TRUE(LoadSafetensorsInto(path, g, g.parameters, params).ok());
  int differ = 0;
  for (int i = 0; i < 65536; ++i) {
    _Float16 h;
    const uint16_t bits = static_cast<uint16_t>(i);
    std::memcpy(&h, &bits, 2);
    const float want = static_cast<float>(h), got = params["h"].data<float>()[i];
    uint32_t a, b;
    std::memcpy(&a, &want, 4);
    std::memcpy(&b, &got, 4);
    // NaN payloads: the compiler may quiet a signalling NaN; both must be NaN.
    differ += std::isnan(want) ? !std::isnan(got) : a != b;
    differ += std::bit_cast<uint32_t>(params["b"].data<float>()[i]) != (uint32_t{bits} << 16);
  }
  EXPECT_EQ(differ, 0);
}

TEST(SafetensorsTest, LoadIntoChecksEveryNameShapeAndDtype) {
  TempDir dir;
  Graph g = GraphWithParameters({"w", "b", "onnx::MatMul_7"});
  Tensor w = RandomTensor({2, 3}, 1), b = RandomTensor({3}, 2), m = RandomTensor({3, 2}, 3);
  std::map<std::string, Tensor> params;
  params["w"] = Tensor(DType::kFloat32, {2, 3});
  params["b"] = Tensor(DType::kFloat32, {3});
  params["onnx::MatMul_7"] = Tensor(DType::kFloat32, {3, 2});
  auto load = [&](const std::vector<std::pair<std::string, const Tensor*>>& tensors) {
    const std::string path = dir / "w.safetensors";
    EXPECT_TRUE(WriteSafetensors(path, tensors, {}).ok());
    return LoadSafetensorsInto(path, g, g.parameters, params).message();
  };
  const std::string where = "--init-from " + (dir / "w.safetensors") + ": ";
  EXPECT_EQ(load({{"w", &w}}),
            where +
                "2 parameters of the plan (of 3) are not in the file: 'b', 'onnx::MatMul_7'; "
                "the file must hold every parameter under its PyTorch name");
  Tensor extra(DType::kInt64, {1});
  EXPECT_EQ(load({{"w", &w}, {"b", &b}, {"onnx::MatMul_7", &m}, {"mask", &extra}}),
            where +
                "the file has 1 tensor that no parameter of the plan is named: 'mask'; "
                "foundry loads the trained parameters only (in PyTorch: save "
                "dict(model.named_parameters()), not state_dict(), whose buffers the plan "
                "holds)");
  Tensor f64(DType::kFloat64, {3}), wt = RandomTensor({3, 2}, 4);
  EXPECT_EQ(load({{"w", &wt}, {"b", &f64}, {"onnx::MatMul_7", &w}}),
            where +
                "3 tensors do not fit the plan (F32, BF16 or F16 of the parameter's shape): "
                "'w' is F32[3,2] in the file, the plan's parameter is F32[2,3]; also 'b', "
                "'onnx::MatMul_7'");
  // Nothing was loaded by the failures.
  for (const auto& [name, t] : params)
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], 0.0f) << name;
  EXPECT_EQ(load({{"onnx::MatMul_7", &m}, {"b", &b}, {"w", &w}}), "");
  EXPECT_TRUE(params["w"].BitwiseEqual(w));
  EXPECT_TRUE(params["b"].BitwiseEqual(b));
  EXPECT_TRUE(params["onnx::MatMul_7"].BitwiseEqual(m));
  EXPECT_EQ(LoadSafetensorsInto(dir / "none", g, g.parameters, params).message(),
            "--init-from: cannot open '" + (dir / "none") + "': No such file or directory");
}

}  // namespace
}  // namespace foundry
