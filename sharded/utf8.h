// UTF-8 encoding of one code point: what the index's JSON reader
// (\u escapes), PlainValue's parser (\x, \u, \U escapes) and the pickle
// writer (protocol 2's latin-1 spelling of bytes) append text with.
#ifndef SHARDLIGHT_SHARDED_UTF8_H_
#define SHARDLIGHT_SHARDED_UTF8_H_

#include <cstdint>
#include <string>

namespace shardlight::sharded {

// Appends code point `cp` (0 .. 0x10FFFF; callers check surrogates and range)
// as 1 to 4 bytes of UTF-8.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_UTF8_H_
