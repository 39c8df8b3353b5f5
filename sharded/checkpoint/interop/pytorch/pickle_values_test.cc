// Plain values out of pickles as Python writes them (the bytes below are
// what pickle.dumps prints for each value and protocol): bytes in every
// protocol's spelling, containers, and what is refused.
#include "sharded/checkpoint/interop/pytorch/pickle_values.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

using ::testing::HasSubstr;
using namespace std::string_literals;

absl::StatusOr<PlainValue> Read(const std::string& pickle) {
  auto g = ReadPickle(pickle);
  if (!g.ok()) return g.status();
  return PlainValueOf(*g, g->root());
}

std::string ReprOf(const std::string& pickle) {
  auto v = Read(pickle);
  return v.ok() ? v->Repr() : "error: " + std::string(v.status().message());
}

TEST(PickleValuesTest, BytesInEveryProtocolsSpelling) {
  // pickle.dumps(b'a\xff', 2): _codecs.encode('a\xff', 'latin1'), never called.
  EXPECT_EQ(ReprOf("\x80\x02" "c_codecs\nencode\nq\x00X\x03\x00\x00\x00" "a\xc3\xbfq\x01X\x06\x00\x00\x00latin1q\x02\x86q\x03Rq\x04."s),
            "b'a\\xff'");
  // pickle.dumps(b'', 2): __builtin__.bytes called with no argument.
  EXPECT_EQ(ReprOf("\x80\x02" "c__builtin__\nbytes\nq\x00)Rq\x01."s), "b''");
  // pickle.dumps(b'ab', 3) and 4: SHORT_BINBYTES; BINBYTES for a long one.
  EXPECT_EQ(ReprOf("\x80\x03" "C\x02" "abq\x00."s), "b'ab'");
  // BINBYTES (what protocol 3+ writes for more than 255 bytes), of 3 here.
  EXPECT_EQ(ReprOf("\x80\x04" "B\x03\x00\x00\x00xyz."s), "b'xyz'");
}

TEST(PickleValuesTest, ContainersAndUnicode) {
  // pickle.dumps({'lr': 0.1, 'betas': (0.9, 0.95), 'name': 'α', 'l': [None, True]}, 2)
  const std::string p =
      "\x80\x02}q\x00(X\x02\x00\x00\x00lrq\x01G?\xb9\x99\x99\x99\x99\x99\x9aX\x05\x00\x00\x00" "betasq\x02G?\xec\xcc"
      "\xcc\xcc\xcc\xcc\xcdG?\xee" "ffffff\x86q\x03X\x04\x00\x00\x00nameq\x04X\x02\x00\x00\x00\xce\xb1q\x05X\x01\x00\x00"
      "\x00lq\x06]q\x07(N\x88" "eu."s;
  EXPECT_EQ(ReprOf(p), "{'lr': 0.1, 'betas': (0.9, 0.95), 'name': '\xce\xb1', 'l': [None, True]}");
}

TEST(PickleValuesTest, WhatIsNoPlainValueIsNamed) {
  // pickle.dumps(fractions.Fraction(1, 3), 2)
  EXPECT_THAT(ReprOf("\x80\x02" "cfractions\nFraction\nq\x00K\x01K\x03\x86q\x01Rq\x02."s),
              HasSubstr("error: it holds a fractions.Fraction (only None"));
  // _codecs.encode of another encoding is not read as bytes.
  EXPECT_THAT(ReprOf("\x80\x02" "c_codecs\nencode\nX\x01\x00\x00\x00" "aX\x05\x00\x00\x00utf-8\x86R."s),
              HasSubstr("_codecs.encode is read only as encode(str, 'latin1')"));
  // A list that holds itself: l = []; l.append(l); pickle.dumps(l, 2)
  EXPECT_THAT(ReprOf("\x80\x02]q\x00h\x00" "a."s), HasSubstr("nested deeper than 64 levels"));
  // A dict keyed by a list cannot be built by Python, nor read here.
  EXPECT_THAT(ReprOf("\x80\x02}q\x00]q\x01K\x01s."s), HasSubstr("a dict key is a list"));
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::pytorch
