// ckpt uploads LOCATION [--abort]: the unfinished S3 multipart uploads under
// an s3://bucket/prefix location -- what a save that crashed mid-upload
// leaves (invisible to loads, but billed) -- one line each (key, upload id,
// when it began), and with --abort each aborted. Configured from the AWS_*
// variables as every s3:// location is. Returns the exit code: 0 done, 1 an
// S3 error (named), 2 a location that is not s3://.
#ifndef SHARDLIGHT_TOOLS_CKPT_UPLOAD_COMMANDS_H_
#define SHARDLIGHT_TOOLS_CKPT_UPLOAD_COMMANDS_H_

#include <ostream>
#include <string>

namespace shardlight::tools::ckpt {

int Uploads(const std::string& location, bool abort, std::ostream& out, std::ostream& err);

}  // namespace shardlight::tools::ckpt

#endif  // SHARDLIGHT_TOOLS_CKPT_UPLOAD_COMMANDS_H_
