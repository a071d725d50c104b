#include "cadre/base/status.h"

namespace cadre {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kTimeout: return "Timeout";
    case Code::kIo: return "IoError";
    case Code::kProtocol: return "ProtocolError";
    case Code::kAuth: return "AuthError";
    case Code::kMismatch: return "Mismatch";
    case Code::kAborted: return "Aborted";
    case Code::kUnavailable: return "Unavailable";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

Error::Error(Status status) : std::runtime_error(status.ToString()), status_(std::move(status)) {}

}  // namespace cadre
