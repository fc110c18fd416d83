// SPDX-License-Identifier: Apache-2.0
// Status / Result: how errors travel inside hvd (values), and Error: how they reach the user.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace hvd {

/// Broad class of a failure; the message carries the detail.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  ///< the caller passed something unusable (null data, bad root, ...)
  kPrecondition,     ///< called in the wrong state (before init(), after shutdown())
  kMismatch,         ///< ranks disagree about a collective (shape, dtype, op, ...)
  kAborted,          ///< shut down or cancelled before the work ran
  kPeerFailure,      ///< another rank died or its transport failed
  kInternal,         ///< a backend (MPI, NCCL, CUDA) call failed
  kElasticState,     ///< elastic mode's committed state cannot be trusted or kept (a state
                     ///< directory not private, a snapshot not authentic, a failed write):
                     ///< a restart cannot fix it
};

const char* status_code_name(StatusCode code);

/// The outcome of an operation: ok, or a code plus a message that names what went wrong.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status OK() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "Mismatch: allreduce 'w': ..." or "OK".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status precondition(std::string m) { return {StatusCode::kPrecondition, std::move(m)}; }
inline Status mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
inline Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status peer_failure(std::string m) { return {StatusCode::kPeerFailure, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status elastic_state_error(std::string m) {
  return {StatusCode::kElasticState, std::move(m)};
}

/// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

/// The exception thrown at the user boundary (wait(), synchronous forms, optimizer, bindings).
class Error : public std::runtime_error {
 public:
  explicit Error(const Status& s) : std::runtime_error(s.message()), code_(s.code()) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

/// Throws hvd::Error when `s` is not ok.
inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace hvd

#define HVD_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::hvd::Status hvd_status_ = (expr);        \
    if (!hvd_status_.ok()) return hvd_status_; \
  } while (0)
