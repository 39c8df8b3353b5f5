#include "sharded/checkpoint/storage/s3/s3_xml.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

int HexValue(char c) { return absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10; }

}  // namespace
std::vector<absl::string_view> XmlBlocks(absl::string_view xml, absl::string_view tag) {
  std::vector<absl::string_view> out;
  const std::string open = absl::StrCat("<", tag);
  const std::string close = absl::StrCat("</", tag, ">");
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != absl::string_view::npos) {
    const size_t after_name = pos + open.size();
    if (after_name >= xml.size()) break;
    const char next = xml[after_name];
    // "<Key" must not match "<KeyMarker".
    if (next != '>' && next != ' ' && next != '/' && next != '\t' && next != '\n' && next != '\r') {
      pos = after_name;
      continue;
    }
    const size_t gt = xml.find('>', after_name);
    if (gt == absl::string_view::npos) break;
    if (xml[gt - 1] == '/') {  // <tag/>
      out.push_back(absl::string_view());
      pos = gt + 1;
      continue;
    }
    const size_t end = xml.find(close, gt + 1);
    if (end == absl::string_view::npos) break;
    out.push_back(xml.substr(gt + 1, end - gt - 1));
    pos = end + close.size();
  }
  return out;
}

std::optional<std::string> XmlText(absl::string_view xml, absl::string_view tag) {
  std::vector<absl::string_view> blocks = XmlBlocks(xml, tag);
  if (blocks.empty()) return std::nullopt;
  return XmlUnescape(blocks.front());
}

std::string XmlUnescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out.push_back(text[i]);
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == absl::string_view::npos) {
      absl::StrAppend(&out, text.substr(i));
      break;
    }
    const absl::string_view entity = text.substr(i + 1, semi - i - 1);
    if (entity == "amp") {
      out.push_back('&');
    } else if (entity == "lt") {
      out.push_back('<');
    } else if (entity == "gt") {
      out.push_back('>');
    } else if (entity == "quot") {
      out.push_back('"');
    } else if (entity == "apos") {
      out.push_back('\'');
    } else {
      // Numeric references only stand for characters XML cannot carry, in
      // keys; listings ask for encoding-type=url, so keys never have them.
      absl::StrAppend(&out, text.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

std::string UrlDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size() && absl::ascii_isxdigit(text[i + 1]) && absl::ascii_isxdigit(text[i + 2])) {
      out.push_back(static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2])));
      i += 2;
    } else {
      out.push_back(c == '+' ? ' ' : c);
    }
  }
  return out;
}

}  // namespace shardlight::sharded::checkpoint::s3
