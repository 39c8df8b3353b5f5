// A flag that names a directory a binary will write into (--checkpoint_dir):
// checked before the job starts, so a path that can never be that directory is
// bad usage (exit 2) instead of a failure deep inside the job.
#ifndef SHARDLIGHT_FLAGS_DIRECTORY_FLAG_H_
#define SHARDLIGHT_FLAGS_DIRECTORY_FLAG_H_

#include <string>

namespace shardlight::tools::flags {

// Makes `path` a writable directory: creates it (and its parents) when
// missing, then creates and removes a probe file in it. Returns "" when that
// worked, else an error naming the flag, the path and the reason: a file
// where the directory (or one of its parents) should be, a parent that
// cannot be created, or a directory this process cannot write into. Writes
// nothing else; an existing directory's contents are untouched.
std::string PrepareWritableDirectory(const std::string& flag, const std::string& path);

}  // namespace shardlight::tools::flags

#endif  // SHARDLIGHT_FLAGS_DIRECTORY_FLAG_H_
