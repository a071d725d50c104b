// Status and Error: how cadre reports expected failures.
//
// Inside event loops and other code that must not unwind, functions return a `Status` (a code and
// a message). At the public communication API a failed Status becomes an `Error` exception, which
// carries the same code, so callers can tell a timeout from a lost peer from bad input.
// Both types are plain values; they are safe to copy between threads.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace cadre {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed (a bad manifest, a bad option)
  kNotFound,         // a key, variable or job that does not exist
  kAlreadyExists,
  kTimeout,          // a deadline passed while waiting (a stalled peer, a missing store key)
  kIo,               // a socket or file operation failed; includes a peer that went away
  kProtocol,         // a peer sent a malformed or unexpected frame, or a different version
  kAuth,             // the job-token handshake failed
  kMismatch,         // ranks disagreed on a collective (name, shape, dtype, op)
  kAborted,          // the operation was cancelled because the communicator is shutting down
  kUnavailable,      // a resource is not available on this machine
  kInternal,         // a bug in cadre
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "Timeout: rank 3 did not answer within 60 s".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status TimeoutError(std::string m) { return {Code::kTimeout, std::move(m)}; }
inline Status IoError(std::string m) { return {Code::kIo, std::move(m)}; }
inline Status ProtocolError(std::string m) { return {Code::kProtocol, std::move(m)}; }
inline Status AuthError(std::string m) { return {Code::kAuth, std::move(m)}; }
inline Status MismatchError(std::string m) { return {Code::kMismatch, std::move(m)}; }
inline Status AbortedError(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status InternalError(std::string m) { return {Code::kInternal, std::move(m)}; }

// The exception form of a failed Status, thrown at API boundaries.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status);
  Error(Code code, std::string message) : Error(Status(code, std::move(message))) {}

  Code code() const { return status_.code(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Throws Error(status) unless status is ok.
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw Error(status);
}

}  // namespace cadre

// Returns from the enclosing function if `expr` yields a failed Status.
#define CADRE_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::cadre::Status _cadre_status = (expr);  \
    if (!_cadre_status.ok()) return _cadre_status; \
  } while (0)
