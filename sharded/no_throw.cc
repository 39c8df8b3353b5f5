#include "sharded/no_throw.h"

#include <c10/util/Exception.h>

#include <exception>
#include <new>

#include "absl/strings/str_cat.h"

namespace shardlight::sharded {

absl::Status StatusFromCurrentException() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch error: ", e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("exception of an unknown type");
  }
}

}  // namespace shardlight::sharded
