// What every fuzz target in this folder defines, and the check it uses for
// the properties it asserts beyond "does not crash".
//
// Each target implements libFuzzer's entry point; the same function is linked
// into a libFuzzer binary (bazel build --config=fuzz, clang-14, ASan+UBSan)
// and into a corpus test that every `bazel test //...` runs (corpus_driver.cc).
#ifndef SHARDLIGHT_TESTS_FUZZ_FUZZ_TARGET_H_
#define SHARDLIGHT_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// A property of the parser that failed: print it and abort, so both libFuzzer
// and the corpus test report the input.
#define FUZZ_CHECK(cond)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                             \
    }                                                                           \
  } while (0)

#endif  // SHARDLIGHT_TESTS_FUZZ_FUZZ_TARGET_H_
