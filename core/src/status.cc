// SPDX-License-Identifier: Apache-2.0
// Status names and formatting.
#include "hvd/core/status.h"

namespace hvd {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kPrecondition:
      return "Precondition";
    case StatusCode::kMismatch:
      return "Mismatch";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kPeerFailure:
      return "PeerFailure";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kElasticState:
      return "ElasticState";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace hvd
