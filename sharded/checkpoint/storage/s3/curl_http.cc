#include "sharded/checkpoint/storage/s3/curl_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

// curl_global_init is not thread-safe; every client goes through here first.
void GlobalInitOnce() {
  static const bool ok = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)ok;
}

// Error bodies are small XML documents; a misbehaving server cannot make us
// buffer more than this of one.
constexpr size_t kMaxErrorBody = 1 << 16;

struct Exchange {
  CURL* curl = nullptr;
  const HttpRequest* request = nullptr;
  HttpResponse* response = nullptr;
  size_t body_sent = 0;
  bool sink_overflow = false;
};

long CurrentStatus(CURL* curl) {
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* ex = static_cast<Exchange*>(user);
  absl::string_view line(data, size * n);
  // A new status line (after "100 Continue", or a redirect) starts over.
  if (absl::StartsWith(line, "HTTP/")) {
    ex->response->headers.clear();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    ex->response->headers[absl::AsciiStrToLower(line.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* ex = static_cast<Exchange*>(user);
  const size_t bytes = size * n;
  HttpResponse& r = *ex->response;
  const long status = CurrentStatus(ex->curl);
  if (status >= 200 && status < 300 && ex->request->sink != nullptr) {
    if (r.sink_bytes + static_cast<int64_t>(bytes) > ex->request->sink_capacity) {
      ex->sink_overflow = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    std::memcpy(ex->request->sink + r.sink_bytes, data, bytes);
    r.sink_bytes += static_cast<int64_t>(bytes);
    return bytes;
  }
  if (status >= 300 && r.body.size() + bytes > kMaxErrorBody) return bytes;  // the rest is dropped
  r.body.append(data, bytes);
  return bytes;
}

size_t OnRead(char* buffer, size_t size, size_t n, void* user) {
  auto* ex = static_cast<Exchange*>(user);
  const absl::string_view body = ex->request->body;
  const size_t len = std::min(size * n, body.size() - ex->body_sent);
  std::memcpy(buffer, body.data() + ex->body_sent, len);
  ex->body_sent += len;
  return len;
}

// curl rewinds the body when it sends the request again on a new connection
// (a kept-alive one the server had closed): without this it cannot, and the
// exchange fails "necessary data rewind wasn't possible".
int OnSeek(void* user, curl_off_t offset, int origin) {
  auto* ex = static_cast<Exchange*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > ex->request->body.size()) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  ex->body_sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

bool Retryable(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_SEND_FAIL_REWIND:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

long Millis(absl::Duration d) { return static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(d))); }

}  // namespace

CurlHttp::CurlHttp() { GlobalInitOnce(); }

CurlHttp::~CurlHttp() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* CurlHttp::Borrow() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void CurlHttp::Return(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(handle);
}

HttpResponse CurlHttp::Perform(const HttpRequest& request) {
  HttpResponse response;
  CURL* curl = static_cast<CURL*>(Borrow());
  if (curl == nullptr) {
    response.transport_error = "curl_easy_init failed";
    return response;
  }
  // Reset clears the options but keeps the handle's live connections.
  curl_easy_reset(curl);
  Exchange ex{curl, &request, &response};

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  // The key's bytes are the path: curl must not squash "/./" or "//".
  curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, Millis(request.connect_timeout));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, Millis(request.total_timeout));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, std::max(1L, Millis(request.stall_timeout) / 1000));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &ex);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &ex);

  if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, &OnRead);
    curl_easy_setopt(curl, CURLOPT_READDATA, &ex);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, &OnSeek);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, &ex);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }

  curl_slist* headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    headers = curl_slist_append(headers, absl::StrCat(name, ": ", value).c_str());
  }
  // No "Expect: 100-continue" round trip before a body, and no form
  // Content-Type curl would otherwise add to a POST.
  headers = curl_slist_append(headers, "Expect:");
  if (request.method == "POST") headers = curl_slist_append(headers, "Content-Type: application/xml");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);

  if (code != CURLE_OK) {
    response.transport_error = absl::StrCat(curl_easy_strerror(code), error[0] != 0 ? ": " : "", error);
    if (ex.sink_overflow) {
      response.transport_error = absl::StrCat("the response body is larger than the ", request.sink_capacity,
                                              " bytes asked for");
    }
    response.transport_retryable = !ex.sink_overflow && Retryable(code);
    response.status = 0;
    // A handle whose transfer failed may hold a broken connection: drop it.
    curl_easy_cleanup(curl);
    return response;
  }
  response.status = CurrentStatus(curl);
  Return(curl);
  return response;
}

}  // namespace shardlight::sharded::checkpoint::s3
