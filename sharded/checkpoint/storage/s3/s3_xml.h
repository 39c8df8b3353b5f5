// The little XML that S3 responses need: the text of named elements
// (<Key>, <UploadId>, <Code>...) and the blocks they sit in (<Contents>,
// <Upload>). S3's response documents are flat and well-formed; this is not a
// general XML parser, and never sees anything but S3's replies.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_XML_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_XML_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint::s3 {

// The raw content of each <tag ...>...</tag> (or empty for <tag/>), in order;
// a block of the same name nested inside another is not looked for.
std::vector<absl::string_view> XmlBlocks(absl::string_view xml, absl::string_view tag);

// The decoded text of the first <tag>, if any.
std::optional<std::string> XmlText(absl::string_view xml, absl::string_view tag);

// &amp; &lt; &gt; &quot; &apos; decoded.
std::string XmlUnescape(absl::string_view text);

// A value of a listing asked for with encoding-type=url (%XX, and '+' for a
// space, as AWS writes them).
std::string UrlDecode(absl::string_view text);

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_XML_H_
