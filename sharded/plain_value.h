// PlainValue: a non-tensor entry of a state dict -- a step, a learning rate,
// a scheduler's or a data loader's state -- as Python holds it: None, bool,
// int (64-bit), float, str (UTF-8), bytes, and lists, tuples and dicts of
// them. It is what checkpoints store beside tensors (FORMAT.md's "values"),
// what a DCP or torch.save checkpoint's plain entries import as, and what
// they export back to.
//
// Its text form is Python's repr (Repr): what `ckpt inspect` prints, what
// Python's ast.literal_eval reads back (but for nan and inf, which repr
// spells as bare words), and what an index stores. ParsePlainValue reads
// exactly the forms Repr writes (plus insignificant spaces and either quote),
// and refuses anything else with InvalidArgument naming the byte offset:
// unknown words, ints outside int64, bad escapes, str that is not UTF-8 or
// holds a surrogate, unhashable dict keys (lists, dicts), nesting deeper than
// kMaxPlainValueDepth.
#ifndef SHARDLIGHT_SHARDED_PLAIN_VALUE_H_
#define SHARDLIGHT_SHARDED_PLAIN_VALUE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::sharded {

constexpr int kMaxPlainValueDepth = 64;

class PlainValue {
 public:
  enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kStr, kBytes, kList, kTuple, kDict };

  PlainValue() = default;  // None
  static PlainValue None() { return PlainValue(); }
  static PlainValue Bool(bool v);
  static PlainValue Int(int64_t v);
  static PlainValue Float(double v);
  static PlainValue Str(std::string utf8);
  static PlainValue Bytes(std::string bytes);
  static PlainValue List(std::vector<PlainValue> items);
  static PlainValue Tuple(std::vector<PlainValue> items);
  // Keys and values alternate: key0, value0, key1, value1, ... (insertion
  // order, as Python keeps it). An odd count drops the last.
  static PlainValue Dict(std::vector<PlainValue> keys_and_values);

  Kind kind() const { return kind_; }
  bool boolean() const { return int_ != 0; }        // kBool
  int64_t integer() const { return int_; }          // kInt (kBool: 0 or 1)
  double real() const { return real_; }             // kFloat
  const std::string& text() const { return text_; } // kStr, kBytes
  // kList, kTuple: the items; kDict: key0, value0, key1, value1, ...
  const std::vector<PlainValue>& items() const { return items_; }
  // kDict with a str key `key`: its value; nullptr otherwise.
  const PlainValue* Find(absl::string_view key) const;

  // Same kind and contents; floats compare by bits (so nan equals itself).
  bool operator==(const PlainValue& o) const;
  bool operator!=(const PlainValue& o) const { return !(*this == o); }

  // Python's repr: None, True, 7, 0.001, 1e-05, 'text', b'\x00', [1, 2],
  // (1,), {'lr': 0.1}. Strings are quoted as Python quotes them (single
  // quotes unless the text holds one and no double quote); printable
  // non-ASCII characters appear as themselves, control and format characters
  // as \x.., \u.... escapes.
  std::string Repr() const;
  void AppendRepr(std::string* out) const;

  // OK, or InvalidArgument naming what is wrong: a str that is not valid
  // UTF-8, a dict key that is a list or a dict (or holds one), nesting deeper
  // than kMaxPlainValueDepth.
  absl::Status Validate() const;

 private:
  Kind kind_ = Kind::kNone;
  int64_t int_ = 0;
  double real_ = 0;
  std::string text_;
  std::vector<PlainValue> items_;
};

// The kind's Python type name ("NoneType", "bool", "int", ...).
const char* PlainKindName(PlainValue::Kind kind);

// Python's repr of a float: the shortest digits that read back as the same
// double, fixed-point for decimal exponents -4..15, else "1e-05" style
// ("0.1", "100.0", "1e+16", "inf", "nan", "-0.0").
std::string FloatRepr(double v);

// Reads what Repr writes (see the top of this file).
absl::StatusOr<PlainValue> ParsePlainValue(absl::string_view text);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_PLAIN_VALUE_H_
