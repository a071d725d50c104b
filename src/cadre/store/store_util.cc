#include "cadre/store/store_util.h"

#include <charconv>

#include "cadre/base/status.h"

namespace cadre::store {

Bytes EncodeCounter(int64_t value) {
  std::string s = std::to_string(value);
  return Bytes(s.begin(), s.end());
}

int64_t DecodeCounter(const std::string& key, const Bytes& value) {
  int64_t out = 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (ec != std::errc() || ptr != end) {
    throw Error(InvalidArgument("store key '" + key + "' holds a value that is not a counter"));
  }
  return out;
}

Status StoreWaitError(const Error& e, const std::string& absent, const std::string& awaited) {
  if (e.code() == Code::kTimeout) return TimeoutError(absent + ": " + e.what());
  return Status(e.code(), "the rendezvous store failed before " + awaited + ": " + e.what());
}

std::string MissingKeysMessage(const std::vector<std::string>& missing, Duration timeout) {
  std::string m = "store keys not set within " + std::to_string(timeout.count()) + " ms:";
  size_t shown = 0;
  for (const auto& k : missing) {
    if (shown++ == 8) {
      m += " ... (" + std::to_string(missing.size()) + " in all)";
      break;
    }
    m += " '" + k + "'";
  }
  return m;
}

}  // namespace cadre::store
