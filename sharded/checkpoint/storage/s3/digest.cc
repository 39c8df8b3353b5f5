#include "sharded/checkpoint/storage/s3/digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdio>
#include <cstdlib>

namespace shardlight::sharded::checkpoint::s3 {
namespace {

[[noreturn]] void OpenSslBroken(const char* what) {
  std::fprintf(stderr, "shardlight: OpenSSL's %s failed; libcrypto is unusable\n", what);
  std::abort();
}

std::string Digest(const EVP_MD* md, absl::string_view data, const char* what) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), out, &n, md, nullptr) != 1) OpenSslBroken(what);
  return std::string(reinterpret_cast<const char*>(out), n);
}

}  // namespace

std::string HexEncode(absl::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kHex[b >> 4];
    out[2 * i + 1] = kHex[b & 0xf];
  }
  return out;
}

std::string Sha256(absl::string_view data) { return Digest(EVP_sha256(), data, "SHA-256"); }

std::string Sha256Hex(absl::string_view data) { return HexEncode(Sha256(data)); }

std::string Md5Hex(absl::string_view data) { return HexEncode(Digest(EVP_md5(), data, "MD5")); }

std::string HmacSha256(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n) == nullptr) {
    OpenSslBroken("HMAC-SHA256");
  }
  return std::string(reinterpret_cast<const char*>(out), n);
}

}  // namespace shardlight::sharded::checkpoint::s3
