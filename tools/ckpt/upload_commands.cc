#include "tools/ckpt/upload_commands.h"

#include <memory>
#include <utility>

#include "sharded/checkpoint/storage/s3/s3_client.h"
#include "sharded/checkpoint/storage/s3/s3_config.h"
#include "sharded/checkpoint/storage/s3/s3_storage.h"

namespace shardlight::tools::ckpt {

namespace s3 = sharded::checkpoint::s3;

int Uploads(const std::string& location, bool abort, std::ostream& out, std::ostream& err) {
  if (!s3::IsS3Path(location)) {
    err << "ckpt: uploads takes an s3://bucket/prefix location, not '" << location << "'\n";
    return 2;
  }
  const auto where = s3::ParseS3Path(location);
  if (!where.ok()) {
    err << "ckpt: " << where.status().message() << "\n";
    return 2;
  }
  auto config = s3::S3ConfigFromEnvironment();
  if (!config.ok()) {
    err << "ckpt: cannot reach '" << location << "': " << config.status().message() << "\n";
    return 1;
  }
  const std::unique_ptr<s3::S3Client> client = s3::S3Client::Create(*std::move(config));
  const std::string prefix = where->key.empty() ? "" : where->key + "/";
  const auto uploads = client->ListMultipartUploads(where->bucket, prefix);
  if (!uploads.ok()) {
    err << "ckpt: listing the unfinished uploads under '" << location << "': " << uploads.status().message() << "\n";
    return 1;
  }
  int failed = 0;
  for (const s3::MultipartUpload& u : *uploads) {
    out << "s3://" << where->bucket << "/" << u.key << "  upload " << u.upload_id << "  begun " << u.initiated;
    if (abort) {
      const absl::Status s = client->AbortMultipartUpload(where->bucket, u.key, u.upload_id);
      out << (s.ok() ? "  aborted" : "  NOT aborted: " + std::string(s.message()));
      failed += s.ok() ? 0 : 1;
    }
    out << "\n";
  }
  out << uploads->size() << (uploads->size() == 1 ? " unfinished upload" : " unfinished uploads") << " under '"
      << location << "'" << (abort ? (failed == 0 ? ", all aborted" : ", some not aborted") : "") << "\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace shardlight::tools::ckpt
