#include "sharded/checkpoint/format/json_stream.h"

#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/checkpoint/format/names.h"

namespace shardlight::sharded::checkpoint {
namespace {

using Json = nlohmann::json;

// nlohmann's messages quote the last bytes read, which may be invalid UTF-8.
std::string EscapeBytes(std::string_view text) {
  std::string out;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(ch);
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  return out;
}

// Builds the kept part of the document; see JsonStreamSpec.
class StreamHandler : public nlohmann::json_sax<Json> {
 public:
  explicit StreamHandler(const JsonStreamSpec& spec) : spec_(spec) {}

  absl::Status status() const { return status_; }
  // Whether status() came from on_record (and so is already complete).
  bool record_failed() const { return record_failed_; }
  Json TakeRoot() { return std::move(root_); }

  bool null() override { return Value(nullptr); }
  bool boolean(bool v) override { return Value(v); }
  bool number_integer(number_integer_t v) override { return Value(v); }
  bool number_unsigned(number_unsigned_t v) override { return Value(v); }
  bool number_float(number_float_t v, const string_t&) override { return Value(v); }
  bool string(string_t& v) override { return Value(std::move(v)); }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }

  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    f.keep_member = f.keep && spec_.keep_member(f.path, k);
    if (f.keep && !f.seen.insert(k).second) {
      return Fail(absl::StrCat("key ", Quote(k), " appears twice in the object at ", PathText(f.path)));
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    return Fail(EscapeBytes(ex.what()));
  }

 private:
  struct Frame {
    std::string path;
    bool keep = true;  // whether this container is stored
    Json value;
    std::string key;           // the member being parsed (objects)
    bool keep_member = false;  // whether that member is stored
    std::unordered_set<std::string> seen;
  };

  static std::string PathText(const std::string& path) { return path.empty() ? "the top level" : Quote(path); }

  bool Fail(const std::string& what) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(what);
    return false;
  }

  // Whether the value about to start (a scalar or a container) is stored.
  bool Keeping() const {
    if (frames_.empty()) return true;
    const Frame& f = frames_.back();
    return f.value.is_array() ? f.keep : f.keep_member;
  }

  std::string ChildPath() const {
    if (frames_.empty()) return "";
    const Frame& f = frames_.back();
    return absl::StrCat(f.path, f.value.is_array() ? "/[]" : "/" + f.key);
  }

  bool Attach(Json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = frames_.back();
    if (f.value.is_array()) {
      if (f.value.size() >= spec_.max_array_length) {
        return Fail(absl::StrCat("the array at ", PathText(f.path), " has more than ", spec_.max_array_length,
                                 " elements"));
      }
      f.value.push_back(std::move(v));
    } else {
      f.value[f.key] = std::move(v);
    }
    return true;
  }

  template <typename T>
  bool Value(T&& v) {
    if (!Keeping()) return true;
    return Attach(Json(std::forward<T>(v)));
  }

  bool Open(Json empty) {
    if (static_cast<int>(frames_.size()) >= spec_.max_depth) {
      return Fail(absl::StrCat("nesting is deeper than ", spec_.max_depth, " levels at ", PathText(ChildPath())));
    }
    Frame f;
    f.keep = Keeping();
    f.path = ChildPath();
    f.value = std::move(empty);
    frames_.push_back(std::move(f));
    return true;
  }

  bool Close() {
    Frame f = std::move(frames_.back());
    frames_.pop_back();
    if (!f.keep) return true;
    const int depth = static_cast<int>(frames_.size()) + 1;
    if (f.value.is_object() && spec_.is_record && spec_.is_record(f.path, depth)) {
      const std::string key = frames_.empty() || frames_.back().value.is_array() ? "" : frames_.back().key;
      absl::Status s = spec_.on_record(f.path, key, std::move(f.value));
      if (!s.ok()) {
        if (status_.ok()) {
          status_ = s;
          record_failed_ = true;
        }
        return false;
      }
      return true;
    }
    return Attach(std::move(f.value));
  }

  const JsonStreamSpec& spec_;
  std::vector<Frame> frames_;
  Json root_;
  absl::Status status_;
  bool record_failed_ = false;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonStream(std::string_view text, const JsonStreamSpec& spec,
                                               const std::string& display_name) {
  auto bad = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(display_name, ": ", s.message()));
  };
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") {
    return bad(absl::InvalidArgumentError("starts with a UTF-8 byte-order mark, which JSON here does not allow"));
  }
  StreamHandler handler(spec);
  bool ok;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &handler, nlohmann::detail::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    return bad(absl::InvalidArgumentError(EscapeBytes(e.what())));
  }
  if (handler.record_failed()) return handler.status();
  if (!handler.status().ok()) return bad(handler.status());
  if (!ok) return bad(absl::InvalidArgumentError("is not valid JSON"));
  return handler.TakeRoot();
}

}  // namespace shardlight::sharded::checkpoint
