// The pull reader under the index and header decoders (json_stream.h): the
// strictness the old SAX parser had, through the decoders that use it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/json_stream.h"
#include "sharded/checkpoint/format/safetensors.h"

namespace shardlight::sharded::checkpoint {
namespace {

using ::testing::HasSubstr;

std::string Entry(int i) {
  return absl::StrCat(R"({"dtype":"F32","shape":[1],"data_offsets":[)", 4 * i, ",", 4 * i + 4, "]}");
}

std::string HeaderError(const std::string& json, int64_t data_bytes) {
  return std::string(ParseSafetensorsHeader(json, data_bytes, "h.safetensors").status().message());
}

// A header's root has one key per entry: past the small-object scan the
// duplicate check is hashed, and still finds the first repeat.
TEST(JsonStreamTest, DuplicateKeysOfLargeObjectsAreRefused) {
  std::string json = "{";
  for (int i = 0; i < 100; ++i) absl::StrAppend(&json, i ? "," : "", "\"e", i, "\":", Entry(i));
  ASSERT_TRUE(ParseSafetensorsHeader(json + "}", 400, "h").ok()) << HeaderError(json + "}", 400);
  EXPECT_THAT(HeaderError(absl::StrCat(json, ",\"e57\":", Entry(57), "}"), 400),
              HasSubstr("key 'e57' appears twice in the object at the top level"));
  // The same key spelled with an escape is the same key.
  EXPECT_THAT(HeaderError(absl::StrCat(R"({"a":)", Entry(0), R"(,"\u0061":)", Entry(0), "}"), 4),
              HasSubstr("key 'a' appears twice"));
}

TEST(JsonStreamTest, StringsAreStrictEvenWhenSkipped) {
  const std::string text = UnsealIndex(SerializeIndex([] {
    CheckpointIndex index;
    index.generation = "0123456789abcdef";
    index.block_bytes = 256;
    return index;
  }()));
  ASSERT_TRUE(DecodeIndex(text, "i").ok()) << DecodeIndex(text, "i").status();
  auto with = [&](const std::string& member) {
    std::string t = text;
    t.insert(1, member + ",");
    return std::string(DecodeIndex(t, "i").status().message());
  };
  EXPECT_EQ(with(R"("future": ["ok", {"x": 1, "x": 2}])"), "");  // unknown members: duplicates not checked
  EXPECT_THAT(with("\"future\": \"\xC0\xAF\""), HasSubstr("invalid UTF-8"));
  EXPECT_THAT(with(R"("future": "\ud800")"), HasSubstr("surrogate"));
  EXPECT_THAT(with(R"("future": "\q")"), HasSubstr("invalid escape"));
  EXPECT_THAT(with("\"future\": \"a\tb\""), HasSubstr("control character U+0009"));
  EXPECT_THAT(with(R"("future": [1,])"), HasSubstr("parse error at line 1"));
  EXPECT_THAT(with(R"("future": 01)"), HasSubstr("parse error"));
  EXPECT_THAT(with(R"("future": -)"), HasSubstr("expected a digit"));
  // A kept array is bounded; a skipped one is not.
  std::string long_run = "\"run\": [";
  for (int i = 0; i < 65; ++i) absl::StrAppend(&long_run, i ? "," : "", "\"n", i, "=v\"");
  EXPECT_THAT(with(long_run + "]"), HasSubstr("the array at '/run' has more than 64 elements"));
  std::string long_skip = "\"future\": [";
  for (int i = 0; i < 100; ++i) absl::StrAppend(&long_skip, i ? "," : "", i);
  EXPECT_EQ(with(long_skip + "]"), "");
  std::string trailing = text + "x";
  EXPECT_THAT(std::string(DecodeIndex(trailing, "i").status().message()), HasSubstr("expected the end of the input"));
}

TEST(JsonStreamTest, ReaderWalksValuesAndEscapes) {
  JsonReader r(R"({"a\n":["x\u00e9\ud83d\ude00",-5,18446744073709551615,1e3,true,null]})", JsonLimits{}, "t");
  ASSERT_TRUE(r.BeginObject(true));
  absl::string_view key;
  ASSERT_TRUE(r.NextKey(&key));
  EXPECT_EQ(std::string(key), "a\n");
  ASSERT_TRUE(r.BeginArray(true));
  ASSERT_TRUE(r.NextElement());
  absl::string_view s;
  ASSERT_TRUE(r.ReadString(&s));
  EXPECT_EQ(std::string(s), "x\xC3\xA9\xF0\x9F\x98\x80");
  JsonReader::Number n;
  ASSERT_TRUE(r.NextElement() && r.ReadNumber(&n));
  EXPECT_EQ(n.kind, JsonReader::Number::kInt);
  EXPECT_EQ(n.i, -5);
  ASSERT_TRUE(r.NextElement() && r.ReadNumber(&n));
  EXPECT_EQ(n.kind, JsonReader::Number::kUint);
  EXPECT_EQ(n.u, UINT64_MAX);
  ASSERT_TRUE(r.NextElement() && r.ReadNumber(&n));
  EXPECT_EQ(n.kind, JsonReader::Number::kFloat);
  bool b = false;
  ASSERT_TRUE(r.NextElement() && r.ReadBool(&b));
  EXPECT_TRUE(b);
  ASSERT_TRUE(r.NextElement() && r.ReadNull());
  EXPECT_FALSE(r.NextElement());
  EXPECT_FALSE(r.NextKey(&key));
  EXPECT_TRUE(r.End());
  EXPECT_TRUE(r.ok());
  std::string quoted;
  AppendJsonString(&quoted, "a\"b\\c\n\x01");
  EXPECT_EQ(quoted, "\"a\\\"b\\\\c\\n\\u0001\"");
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
