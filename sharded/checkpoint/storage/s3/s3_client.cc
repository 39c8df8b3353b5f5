#include "sharded/checkpoint/storage/s3/s3_client.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sharded/checkpoint/storage/s3/digest.h"
#include "sharded/checkpoint/storage/s3/s3_xml.h"
#include "sharded/checkpoint/storage/s3/sigv4.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::s3 {

using Params = std::vector<std::pair<std::string, std::string>>;

struct S3Client::Call {
  Call(const char* op, std::string method, std::string bucket = "", std::string key = "")
      : op(op), method(std::move(method)), bucket(std::move(bucket)), key(std::move(key)) {}

  const char* op;  // S3's name for the operation, for messages
  std::string method;
  std::string bucket;  // empty: the service (ListBuckets)
  std::string key;     // empty: the bucket itself
  Params query;
  Params headers;
  absl::string_view body;
  char* sink = nullptr;
  int64_t sink_capacity = 0;
  // For a conditional write: the ETag its own success would have left.
  std::function<std::string()> own_etag;
  // CompleteMultipartUpload and the copies can fail after their 200 has
  // been sent: the error is then the body. Nowhere else is a 2xx body read
  // as one (an object's bytes may say anything).
  bool error_in_ok_body = false;
};

namespace {

std::string Unquote(absl::string_view etag) {
  absl::ConsumePrefix(&etag, "\"");
  absl::ConsumeSuffix(&etag, "\"");
  return std::string(etag);
}

bool TransientCode(absl::string_view code) {
  return code == "SlowDown" || code == "InternalError" || code == "RequestTimeout" ||
         code == "ConditionalRequestConflict" || code == "OperationAborted" || code == "ServiceUnavailable";
}

bool TransientStatus(long status) { return status == 500 || status == 502 || status == 503 || status == 504; }

absl::StatusCode CodeFor(long status, absl::string_view s3_code) {
  if (s3_code == "RequestTimeTooSkewed") return absl::StatusCode::kPermissionDenied;
  if (absl::StartsWith(s3_code, "BucketAlready")) return absl::StatusCode::kAlreadyExists;
  switch (status) {
    case 404: return absl::StatusCode::kNotFound;
    case 401:
    case 403: return absl::StatusCode::kPermissionDenied;
    case 412: return absl::StatusCode::kFailedPrecondition;
    case 409: return absl::StatusCode::kAborted;
    case 416: return absl::StatusCode::kOutOfRange;
    default: break;
  }
  if (status >= 500 || status == 0) return absl::StatusCode::kUnavailable;
  return absl::StatusCode::kInvalidArgument;
}

// What the operator can do about an error, where something can be said.
std::string Hint(absl::string_view s3_code) {
  if (s3_code == "RequestTimeTooSkewed") {
    return " (this machine's clock differs from the server's by more than S3 allows, 15 minutes: fix the clock)";
  }
  if (s3_code == "InvalidAccessKeyId" || s3_code == "SignatureDoesNotMatch") {
    return " (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)";
  }
  if (s3_code == "NoSuchBucket") return " (the bucket does not exist: create it, or fix the s3:// location)";
  return "";
}

// S3 refuses a signature more than this far from its own clock.
constexpr absl::Duration kMaxClockSkew = absl::Minutes(15);

// S3's <Error><Code>…<Message>…, or names derived from the status where the
// response has no body (HEAD). A bodiless 403 whose Date is further from
// `signed_at` than S3 allows is RequestTimeTooSkewed, as its body would say.
std::pair<std::string, std::string> ErrorCodeAndMessage(const HttpResponse& r, absl::Time signed_at) {
  std::string code = XmlText(r.body, "Code").value_or("");
  std::string message = XmlText(r.body, "Message").value_or("");
  auto date = r.headers.find("date");
  absl::Time server_time;
  std::string ignored;
  if (code.empty() && r.status == 403 && date != r.headers.end() &&
      absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", date->second, &server_time, &ignored) &&
      absl::AbsDuration(server_time - signed_at) > kMaxClockSkew) {
    return {"RequestTimeTooSkewed",
            absl::StrCat("the request was signed at ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", signed_at, absl::UTCTimeZone()),
                         ", the server's time (Date) is ", date->second)};
  }
  if (code.empty()) {
    switch (r.status) {
      case 404: code = "NotFound"; break;
      case 403: code = "Forbidden"; break;
      case 412: code = "PreconditionFailed"; break;
      default: code = absl::StrCat("HTTP", r.status);
    }
  }
  return {code, message};
}

// The ETag S3 gives a multipart object: MD5 of the parts' binary MD5s, "-N".
std::string MultipartETag(const std::vector<CompletedPart>& parts) {
  std::string md5s;
  for (const CompletedPart& p : parts) md5s += absl::HexStringToBytes(Unquote(p.etag));
  return absl::StrCat(Md5Hex(md5s), "-", parts.size());
}

absl::Duration Jittered(absl::Duration backoff) {
  thread_local std::mt19937 rng{std::random_device{}()};
  return backoff * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
}

}  // namespace

std::string S3Url(absl::string_view bucket, absl::string_view key) { return absl::StrCat("s3://", bucket, "/", key); }

std::unique_ptr<S3Client> S3Client::Create(S3Config config, S3ClientOptions options) {
  return std::unique_ptr<S3Client>(new S3Client(std::move(config), options));
}

S3Client::S3Client(S3Config config, S3ClientOptions options)
    : config_(std::move(config)), options_(options), trace_(std::getenv("SHARDLIGHT_S3_TRACE") != nullptr) {}

absl::StatusOr<HttpResponse> S3Client::Send(const Call& call) {
  const std::string where = call.bucket.empty() ? "s3://" : S3Url(call.bucket, call.key);
  auto error = [&](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat("S3 ", call.op, " ", where, ": ", what));
  };

  // Where the request goes, and the path that is both signed and sent.
  SL_ASSIGN_OR_RETURN(const S3Endpoint e,
                      call.bucket.empty() ? EndpointForService(config_) : EndpointForBucket(config_, call.bucket));
  const std::string& host = e.host;
  const std::string path = call.key.empty() ? (e.path_prefix.empty() ? "/" : e.path_prefix)
                                            : absl::StrCat(e.path_prefix, "/", call.key);
  const std::string url = absl::StrCat(e.origin, UriEncode(path, true), call.query.empty() ? "" : "?",
                                       CanonicalQueryString(call.query));
  const std::string payload_hash = call.body.empty()          ? kEmptyPayloadSha256
                                   : options_.unsigned_payload ? kUnsignedPayload
                                                               : Sha256Hex(call.body);

  const absl::Time deadline = absl::Now() + options_.deadline;
  absl::Duration backoff = options_.initial_backoff;
  std::string last;
  for (int attempt = 1;; ++attempt) {
    SigV4Request signing{call.method, path, call.query, call.headers, payload_hash};
    signing.headers.emplace_back("host", host);
    const absl::Time signed_at = absl::Now() + options_.clock_offset;
    AddSigV4Authorization(signing, config_.credentials, config_.region, "s3", signed_at);

    HttpRequest request;
    request.method = call.method;
    request.url = url;
    request.headers = std::move(signing.headers);
    request.body = call.body;
    request.sink = call.sink;
    request.sink_capacity = call.sink_capacity;
    request.connect_timeout = options_.connect_timeout;
    request.stall_timeout = options_.stall_timeout;
    request.total_timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    const absl::Time sent_at = absl::Now();
    HttpResponse response = http_.Perform(request);
    if (trace_) {
      // When it started (Unix seconds) and how long it took: a save's or a
      // load's requests, laid side by side, show where its time goes.
      std::fprintf(stderr, "s3: %.6f %8.3f ms %s %s attempt %d -> %ld, %zu bytes up, %lld down%s%s\n",
                   absl::ToDoubleSeconds(sent_at - absl::UnixEpoch()), absl::ToDoubleMilliseconds(absl::Now() - sent_at),
                   call.method.c_str(), url.c_str(), attempt, response.status, call.body.size(),
                   static_cast<long long>(response.sink_bytes + static_cast<int64_t>(response.body.size())),
                   response.transport_error.empty() ? "" : " ", response.transport_error.c_str());
    }

    bool transient = false;
    if (!response.transport_error.empty()) {
      last = absl::StrCat("no response from ", host, ": ", response.transport_error);
      if (!response.transport_retryable) return error(absl::StatusCode::kUnavailable, last);
      transient = true;
    } else if (response.status >= 200 && response.status < 300 &&
               !(call.error_in_ok_body && absl::StrContains(response.body, "<Error>"))) {
      return response;
    } else {
      auto [code, message] = ErrorCodeAndMessage(response, signed_at);
      last = absl::StrCat("HTTP ", response.status, " ", code, message.empty() ? "" : ": ", message, Hint(code));
      if (response.status == 412 && attempt > 1 && call.own_etag && IsOurs(call, call.own_etag())) {
        // Our own earlier attempt landed before its connection dropped.
        response.status = 200;
        return response;
      }
      transient = TransientStatus(response.status) || TransientCode(code);
      if (!transient) return error(CodeFor(response.status, code), last);
    }
    if (attempt >= options_.max_attempts || absl::Now() + backoff >= deadline) {
      return error(absl::StatusCode::kUnavailable,
                   absl::StrCat("gave up after ", attempt, " attempts (deadline ", absl::FormatDuration(options_.deadline),
                                "); last: ", last));
    }
    absl::SleepFor(Jittered(backoff));
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

bool S3Client::IsOurs(const Call& call, const std::string& expected_etag) {
  absl::StatusOr<ObjectInfo> info = HeadObject(call.bucket, call.key);
  return info.ok() && info->etag == expected_etag;
}

absl::StatusOr<std::vector<std::string>> S3Client::ListBuckets() {
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send({"ListBuckets", "GET"}));
  std::vector<std::string> names;
  for (absl::string_view b : XmlBlocks(r.body, "Bucket")) names.push_back(XmlText(b, "Name").value_or(""));
  return names;
}

absl::Status S3Client::CreateBucket(const std::string& bucket) {
  return Send({"CreateBucket", "PUT", bucket}).status();
}

absl::StatusOr<std::string> S3Client::PutObject(const std::string& bucket, const std::string& key,
                                                absl::string_view body, bool if_none_match) {
  Call call{"PutObject", "PUT", bucket, key};
  call.body = body;
  if (if_none_match) {
    call.headers.emplace_back("If-None-Match", "*");
    call.own_etag = [body] { return Md5Hex(body); };
  }
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send(call));
  return Unquote(r.headers["etag"]);
}

absl::StatusOr<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key) {
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send({"GetObject", "GET", bucket, key}));
  return std::move(r.body);
}

absl::StatusOr<int64_t> S3Client::GetObjectRange(const std::string& bucket, const std::string& key, int64_t offset,
                                                 int64_t n, void* buffer) {
  if (offset < 0 || n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("S3 GetObject ", S3Url(bucket, key), ": bad range offset ", offset, " length ", n));
  }
  if (n == 0) return 0;
  Call call{"GetObject", "GET", bucket, key};
  call.headers.emplace_back("Range", absl::StrCat("bytes=", offset, "-", offset + n - 1));
  call.sink = static_cast<char*>(buffer);
  call.sink_capacity = n;
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send(call));
  // A server that ignores Range answers 200 with the whole object: only
  // right when that is exactly the range asked for.
  if (r.status == 200 && offset != 0) {
    return absl::InternalError(absl::StrCat("S3 GetObject ", S3Url(bucket, key),
                                            ": the server ignored the Range header (HTTP 200, not 206)"));
  }
  return r.sink_bytes;
}

absl::StatusOr<ObjectInfo> S3Client::HeadObject(const std::string& bucket, const std::string& key) {
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send({"HeadObject", "HEAD", bucket, key}));
  ObjectInfo info{key, 0, Unquote(r.headers["etag"])};
  if (!absl::SimpleAtoi(r.headers["content-length"], &info.size)) {
    return absl::InternalError(absl::StrCat("S3 HeadObject ", S3Url(bucket, key), ": no Content-Length in the reply"));
  }
  return info;
}

absl::StatusOr<ListObjectsResult> S3Client::ListObjects(const std::string& bucket, const std::string& prefix,
                                                        const std::string& delimiter, int page_size, int limit) {
  ListObjectsResult result;
  std::string token;
  while (true) {
    Call call{"ListObjectsV2", "GET", bucket};
    // encoding-type=url: keys come back percent-encoded, so any byte a key
    // holds survives the XML.
    call.query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", absl::StrCat(page_size)},
                  {"encoding-type", "url"}};
    if (!delimiter.empty()) call.query.emplace_back("delimiter", delimiter);
    if (!token.empty()) call.query.emplace_back("continuation-token", token);
    call.key = "";
    SL_ASSIGN_OR_RETURN(HttpResponse r, Send(call));
    for (absl::string_view c : XmlBlocks(r.body, "Contents")) {
      ObjectInfo info{UrlDecode(XmlText(c, "Key").value_or("")), 0, Unquote(XmlText(c, "ETag").value_or(""))};
      if (!absl::SimpleAtoi(XmlText(c, "Size").value_or(""), &info.size) || info.key.empty()) {
        return absl::InternalError(
            absl::StrCat("S3 ListObjectsV2 ", S3Url(bucket, prefix), ": an entry without Key or Size"));
      }
      result.objects.push_back(std::move(info));
    }
    for (absl::string_view p : XmlBlocks(r.body, "CommonPrefixes")) {
      result.common_prefixes.push_back(UrlDecode(XmlText(p, "Prefix").value_or("")));
    }
    if (XmlText(r.body, "IsTruncated").value_or("false") != "true") break;
    if (limit > 0 && static_cast<int>(result.objects.size() + result.common_prefixes.size()) >= limit) break;
    token = XmlText(r.body, "NextContinuationToken").value_or("");
    if (token.empty()) {
      return absl::InternalError(absl::StrCat("S3 ListObjectsV2 ", S3Url(bucket, prefix),
                                              ": a truncated listing without NextContinuationToken"));
    }
  }
  return result;
}

absl::Status S3Client::CopyObject(const std::string& bucket, const std::string& from_key, const std::string& to_key) {
  // S3's limit for one CopyObject; larger objects are copied part by part.
  constexpr int64_t kMaxSingleCopy = int64_t{5} << 30;
  constexpr int64_t kCopyPartBytes = int64_t{1} << 30;
  const std::string source = absl::StrCat("/", bucket, "/", UriEncode(from_key, true));
  SL_ASSIGN_OR_RETURN(const ObjectInfo info, HeadObject(bucket, from_key));
  if (info.size <= kMaxSingleCopy) {
    Call call{"CopyObject", "PUT", bucket, to_key};
    call.error_in_ok_body = true;
    call.headers.emplace_back("x-amz-copy-source", source);
    return Send(call).status();
  }
  SL_ASSIGN_OR_RETURN(const std::string upload_id, CreateMultipartUpload(bucket, to_key));
  std::vector<CompletedPart> parts;
  absl::Status status;
  for (int64_t begin = 0; begin < info.size && status.ok(); begin += kCopyPartBytes) {
    const int number = static_cast<int>(parts.size()) + 1;
    Call call{"UploadPartCopy", "PUT", bucket, to_key};
    call.error_in_ok_body = true;
    call.query = {{"partNumber", absl::StrCat(number)}, {"uploadId", upload_id}};
    call.headers.emplace_back("x-amz-copy-source", source);
    call.headers.emplace_back("x-amz-copy-source-range",
                              absl::StrCat("bytes=", begin, "-", std::min(info.size, begin + kCopyPartBytes) - 1));
    absl::StatusOr<HttpResponse> r = Send(call);
    status = r.status();
    if (r.ok()) parts.push_back({number, Unquote(XmlText(r->body, "ETag").value_or(""))});
  }
  if (status.ok()) status = CompleteMultipartUpload(bucket, to_key, upload_id, parts).status();
  if (!status.ok()) AbortMultipartUpload(bucket, to_key, upload_id).IgnoreError();
  return status;
}

absl::Status S3Client::DeleteObject(const std::string& bucket, const std::string& key) {
  return Send({"DeleteObject", "DELETE", bucket, key}).status();
}

absl::StatusOr<std::string> S3Client::CreateMultipartUpload(const std::string& bucket, const std::string& key) {
  Call call{"CreateMultipartUpload", "POST", bucket, key};
  call.query = {{"uploads", ""}};
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send(call));
  std::string id = XmlText(r.body, "UploadId").value_or("");
  if (id.empty()) {
    return absl::InternalError(absl::StrCat("S3 CreateMultipartUpload ", S3Url(bucket, key), ": no UploadId in the reply"));
  }
  return id;
}

absl::StatusOr<std::string> S3Client::UploadPart(const std::string& bucket, const std::string& key,
                                                 const std::string& upload_id, int part_number,
                                                 absl::string_view body) {
  Call call{"UploadPart", "PUT", bucket, key};
  call.query = {{"partNumber", absl::StrCat(part_number)}, {"uploadId", upload_id}};
  call.body = body;
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send(call));
  std::string etag = Unquote(r.headers["etag"]);
  if (etag.empty()) {
    return absl::InternalError(
        absl::StrCat("S3 UploadPart ", S3Url(bucket, key), " part ", part_number, ": no ETag in the reply"));
  }
  return etag;
}

absl::StatusOr<std::string> S3Client::CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                                              const std::string& upload_id,
                                                              const std::vector<CompletedPart>& parts,
                                                              bool if_none_match) {
  std::string xml = "<CompleteMultipartUpload>";
  for (const CompletedPart& p : parts) {
    // ETags are hex digits (and '-'): nothing in them needs XML escaping,
    // and anything else is not an ETag this client returned.
    const std::string etag = Unquote(p.etag);
    if (etag.empty() || !std::all_of(etag.begin(), etag.end(), [](char c) { return absl::ascii_isalnum(c) || c == '-'; })) {
      return absl::InvalidArgumentError(absl::StrCat("S3 CompleteMultipartUpload ", S3Url(bucket, key), ": part ",
                                                     p.part_number, " has ETag '", p.etag, "', not one UploadPart gave"));
    }
    absl::StrAppend(&xml, "<Part><PartNumber>", p.part_number, "</PartNumber><ETag>&quot;", etag,
                    "&quot;</ETag></Part>");
  }
  xml += "</CompleteMultipartUpload>";
  Call call{"CompleteMultipartUpload", "POST", bucket, key};
  call.error_in_ok_body = true;
  call.query = {{"uploadId", upload_id}};
  call.body = xml;
  if (if_none_match) {
    call.headers.emplace_back("If-None-Match", "*");
    call.own_etag = [&parts] { return MultipartETag(parts); };
  }
  SL_ASSIGN_OR_RETURN(HttpResponse r, Send(call));
  return Unquote(XmlText(r.body, "ETag").value_or(""));
}

absl::Status S3Client::AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                            const std::string& upload_id) {
  Call call{"AbortMultipartUpload", "DELETE", bucket, key};
  call.query = {{"uploadId", upload_id}};
  return Send(call).status();
}

absl::StatusOr<std::vector<MultipartUpload>> S3Client::ListMultipartUploads(const std::string& bucket,
                                                                            const std::string& prefix) {
  std::vector<MultipartUpload> uploads;
  std::string key_marker, upload_id_marker;
  while (true) {
    Call call{"ListMultipartUploads", "GET", bucket};
    call.query = {{"uploads", ""}, {"prefix", prefix}, {"encoding-type", "url"}};
    if (!key_marker.empty()) call.query.emplace_back("key-marker", key_marker);
    if (!upload_id_marker.empty()) call.query.emplace_back("upload-id-marker", upload_id_marker);
    SL_ASSIGN_OR_RETURN(HttpResponse r, Send(call));
    for (absl::string_view u : XmlBlocks(r.body, "Upload")) {
      uploads.push_back({UrlDecode(XmlText(u, "Key").value_or("")), XmlText(u, "UploadId").value_or(""),
                         XmlText(u, "Initiated").value_or("")});
    }
    if (XmlText(r.body, "IsTruncated").value_or("false") != "true") break;
    key_marker = UrlDecode(XmlText(r.body, "NextKeyMarker").value_or(""));
    upload_id_marker = XmlText(r.body, "NextUploadIdMarker").value_or("");
    if (key_marker.empty()) {
      return absl::InternalError(absl::StrCat("S3 ListMultipartUploads ", S3Url(bucket, prefix),
                                              ": a truncated listing without NextKeyMarker"));
    }
  }
  return uploads;
}

}  // namespace shardlight::sharded::checkpoint::s3
