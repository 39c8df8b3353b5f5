#include "sharded/plain_value.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace shardlight::sharded {
namespace {

using V = PlainValue;

// Each repr below is what Python 3 prints for the same value.
TEST(PlainValueTest, ReprMatchesPython) {
  EXPECT_EQ(V::None().Repr(), "None");
  EXPECT_EQ(V::Bool(true).Repr(), "True");
  EXPECT_EQ(V::Int(-7).Repr(), "-7");
  EXPECT_EQ(V::Float(0.1).Repr(), "0.1");
  EXPECT_EQ(V::Float(100).Repr(), "100.0");
  EXPECT_EQ(V::Float(1e-5).Repr(), "1e-05");
  EXPECT_EQ(V::Float(1e16).Repr(), "1e+16");
  EXPECT_EQ(V::Float(1e15).Repr(), "1000000000000000.0");
  EXPECT_EQ(V::Float(0.0001).Repr(), "0.0001");
  EXPECT_EQ(V::Float(-0.0).Repr(), "-0.0");
  EXPECT_EQ(V::Float(1.0 / 3).Repr(), "0.3333333333333333");
  EXPECT_EQ(V::Float(std::nan("")).Repr(), "nan");
  EXPECT_EQ(V::Float(-INFINITY).Repr(), "-inf");
  EXPECT_EQ(V::Str("run-\xce\xb1 it's").Repr(), "\"run-\xce\xb1 it's\"");
  EXPECT_EQ(V::Str("a\"b'c\\\n\x01").Repr(), "'a\"b\\'c\\\\\\n\\x01'");
  EXPECT_EQ(V::Str("\xc2\xad\xe2\x80\xa8").Repr(), "'\\xad\\u2028'");
  EXPECT_EQ(V::Bytes(std::string("ab\x00\xff'", 5)).Repr(), "b\"ab\\x00\\xff'\"");
  EXPECT_EQ(V::Tuple({V::Int(1)}).Repr(), "(1,)");
  EXPECT_EQ(V::Tuple({}).Repr(), "()");
  EXPECT_EQ(V::Dict({V::Str("lr"), V::Float(0.001), V::Str("betas"), V::Tuple({V::Float(0.9), V::Float(0.999)})}).Repr(),
            "{'lr': 0.001, 'betas': (0.9, 0.999)}");
  EXPECT_EQ(V::List({V::None(), V::List({})}).Repr(), "[None, []]");
}

TEST(PlainValueTest, ParseReadsBackEveryRepr) {
  const V nested = V::Dict({V::Str("param_groups"),
                            V::List({V::Dict({V::Str("lr"), V::Float(3e-4), V::Str("params"),
                                              V::List({V::Int(0), V::Int(1)})})}),
                            V::Int(3), V::Bytes(std::string("\x80\x04K\x07.", 5)),
                            V::Tuple({V::Int(1), V::Str("x")}), V::Str("\xf0\x9f\x98\x80 \xe2\x80\x8b"),
                            V::Str("inf"), V::Float(INFINITY), V::Str("nan"), V::Float(std::nan("")),
                            V::Str("big"), V::Int(INT64_MIN), V::Str("t"), V::Bool(false),
                            V::Str("n"), V::None(), V::Str("f"), V::Float(2.5e-300)});
  auto back = ParsePlainValue(nested.Repr());
  ASSERT_TRUE(back.ok()) << back.status() << " " << nested.Repr();
  EXPECT_EQ(*back, nested);
  EXPECT_EQ(back->Find("t")->kind(), V::Kind::kBool);
  EXPECT_EQ(back->Find("absent"), nullptr);
  // What Python also writes: double quotes, spaces, upper-case hex.
  auto python = ParsePlainValue(" [ \"a\" , b'\\xFF' ,(2,), {} ] ");
  ASSERT_TRUE(python.ok()) << python.status();
  EXPECT_EQ(*python, V::List({V::Str("a"), V::Bytes("\xff"), V::Tuple({V::Int(2)}), V::Dict({})}));
}

TEST(PlainValueTest, ParseRefusesWhatReprNeverWrites) {
  for (const char* bad : {"", "none", "1 2", "[1 2]", "(1)", "{1}", "{[1]: 2}", "{(1, []): 2}", "'abc",
                          "9223372036854775808", "1.2.3", "'\\q'", "'\\ud800'", "b'\\u0041'", "b'\xc3\xa9'",
                          "'\xff'", "[1,,2]", "os.system('x')", "--1", "1e", "'\\x4'"}) {
    auto v = ParsePlainValue(bad);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParsePlainValue("1 2").status().message(), "not a plain value at byte 2: text after the value");
  std::string deep(kMaxPlainValueDepth + 2, '[');
  deep += std::string(kMaxPlainValueDepth + 2, ']');
  EXPECT_NE(ParsePlainValue(deep).status().message().find("nested deeper than 64"), absl::string_view::npos);
}

TEST(PlainValueTest, ValidateRefusesBadStrAndUnhashableKeys) {
  EXPECT_TRUE(V::Str("\xce\xb1").Validate().ok());
  EXPECT_EQ(V::Str("\xce").Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(V::Str("\xed\xa0\x80").Validate().code(), absl::StatusCode::kInvalidArgument);  // a surrogate
  EXPECT_EQ(V::Dict({V::List({}), V::Int(1)}).Validate().message(), "a dict key is a list (keys must be hashable)");
  EXPECT_TRUE(V::Dict({V::Tuple({V::Int(1), V::Bytes("x")}), V::List({})}).Validate().ok());
}

TEST(PlainValueTest, EqualityIsByKindAndBits) {
  EXPECT_NE(V::Int(1), V::Bool(true));
  EXPECT_NE(V::Int(1), V::Float(1));
  EXPECT_NE(V::Str("a"), V::Bytes("a"));
  EXPECT_NE(V::List({}), V::Tuple({}));
  EXPECT_NE(V::Float(0.0), V::Float(-0.0));
  EXPECT_EQ(V::Float(std::nan("")), V::Float(std::nan("")));
}

}  // namespace
}  // namespace shardlight::sharded
