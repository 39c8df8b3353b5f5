// One HTTP exchange over libcurl, for the S3 client: a request with an
// optional body, a response whose body goes to a string or straight into a
// caller's buffer (ranged reads land where the caller wants them, no copy).
// Easy handles are pooled so their keep-alive connections are reused across
// requests and threads. No retries and no S3 knowledge here: the client
// decides what a result means.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_CURL_HTTP_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_CURL_HTTP_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardlight::sharded::checkpoint::s3 {

struct HttpRequest {
  std::string method;  // GET, HEAD, PUT, POST, DELETE
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  absl::string_view body;  // PUT and POST; must outlive the exchange
  // A 2xx body goes here (at most `sink_capacity` bytes; more is an error)
  // instead of into HttpResponse::body.
  char* sink = nullptr;
  int64_t sink_capacity = 0;
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration total_timeout = absl::Minutes(5);
  // A transfer moving less than one byte per second for this long is
  // abandoned: a stalled server fails the exchange instead of hanging it.
  absl::Duration stall_timeout = absl::Seconds(30);
};

struct HttpResponse {
  // 0 when no response came (transport_error says why).
  long status = 0;
  // Empty when the exchange completed; otherwise curl's error text.
  std::string transport_error;
  // Whether the transport failure may pass on a new attempt: a refused,
  // reset or dropped connection, a timeout, a partial transfer.
  bool transport_retryable = false;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;       // error bodies always; 2xx bodies without a sink
  int64_t sink_bytes = 0; // bytes written to the sink
};

class CurlHttp {
 public:
  CurlHttp();
  ~CurlHttp();
  CurlHttp(const CurlHttp&) = delete;
  CurlHttp& operator=(const CurlHttp&) = delete;

  // Thread-safe; each call borrows a pooled handle.
  HttpResponse Perform(const HttpRequest& request);

 private:
  void* Borrow();
  void Return(void* handle);

  std::mutex mu_;
  std::vector<void*> idle_;  // CURL*
};

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_CURL_HTTP_H_
