// SPDX-License-Identifier: Apache-2.0
// Wire format of request and response lists: length-prefixed, bounds-checked, in the host's byte
// order (every rank of a job runs the same build on the same architecture).
#include "hvd/core/message.h"

#include <charconv>
#include <cstring>
#include <type_traits>

namespace hvd::core {

const char* op_name(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kJoin:
      return "join";
    case OpType::kAddProcessSet:
      return "add_process_set";
    case OpType::kRemoveProcessSet:
      return "remove_process_set";
  }
  return "invalid";
}

namespace {

// The number of members of aggregate T: the most initializers T{...} accepts.
struct AnyField {
  template <typename T>
  operator T() const;  // declared only: used in unevaluated contexts
};
template <typename T, typename Seq, typename = void>
struct BraceInitializable : std::false_type {};
template <typename T, size_t... I>
struct BraceInitializable<T, std::index_sequence<I...>,
                          std::void_t<decltype(T{(static_cast<void>(I), AnyField{})...})>>
    : std::true_type {};
template <typename T, size_t N = 0>
constexpr size_t aggregate_members() {
  if constexpr (BraceInitializable<T, std::make_index_sequence<N + 1>>::value) {
    return aggregate_members<T, N + 1>();
  } else {
    return N;
  }
}

static_assert(std::is_aggregate_v<Request>);
static_assert(aggregate_members<Request>() == request_field_count(),
              "a Request field is missing from for_each_request_field (message.h): add it there "
              "with its role, so that same_params, the wire format, response_of and "
              "reset_for_reuse all see it");

}  // namespace

bool Request::same_params(const Request& o) const {
  return for_each_request_field([&](auto m, FieldRole role, auto) {
    return role != FieldRole::kParameter || this->*m == o.*m;
  });
}

namespace {

constexpr uint32_t kRequestMagic = 0x68764451;   // "hvDQ"
constexpr uint32_t kResponseMagic = 0x68764452;  // "hvDR"
constexpr uint8_t kMaxOp = static_cast<uint8_t>(OpType::kRemoveProcessSet);
constexpr uint8_t kMaxReduce = static_cast<uint8_t>(ReduceOp::kAdasum);

// Writer and Reader share one field() vocabulary, so each message lists its fields once
// (fields() below) for both directions. Writer::field always succeeds.
class Writer {
 public:
  template <typename T>
  bool field(const T& v) {
    if constexpr (std::is_enum<T>::value) {
      return field(static_cast<uint8_t>(v));  // enumerators travel as one byte
    }
    static_assert(std::is_arithmetic<T>::value || std::is_enum<T>::value, "plain value");
    size_t n = buf_.size();
    buf_.resize(n + sizeof(T));
    std::memcpy(buf_.data() + n, &v, sizeof(T));
    return true;
  }
  bool field(const std::string& s) {
    field(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
    return true;
  }
  template <typename T>
  bool field(const std::vector<T>& v) {
    field(static_cast<uint32_t>(v.size()));
    for (const T& x : v) field(x);
    return true;
  }
  bool field(const Device& d) { return field(d.kind) && field(d.index); }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

// Bounds-checked: every field() fails (and the reader stays failed) past the end or on an
// out-of-range enumerator.
class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  template <typename T>
  bool field(T& v) {
    static_assert(std::is_arithmetic<T>::value, "plain value");
    if (!ok_ || n_ - off_ < sizeof(T)) return fail();
    std::memcpy(&v, d_ + off_, sizeof(T));
    off_ += sizeof(T);
    return true;
  }
  bool field(std::string& s) {
    uint32_t len;
    if (!field(len) || n_ - off_ < len) return fail();
    s.assign(reinterpret_cast<const char*>(d_ + off_), len);
    off_ += len;
    return true;
  }
  template <typename T>
  bool field(std::vector<T>& v) {
    uint32_t len;
    // Each element takes at least one byte: a length beyond the rest is malformed.
    if (!field(len) || n_ - off_ < len) return fail();
    v.resize(len);
    for (auto& x : v) {
      if (!field(x)) return false;
    }
    return true;
  }
  bool field(DataType& t) {
    uint8_t raw;
    if (!field(raw) || !dtype_valid(raw)) return fail();
    t = static_cast<DataType>(raw);
    return true;
  }
  bool field(OpType& op) { return enumeration(&op, kMaxOp); }
  bool field(ReduceOp& op) { return enumeration(&op, kMaxReduce); }
  bool field(DeviceKind& k) { return enumeration(&k, static_cast<uint8_t>(DeviceKind::kCuda)); }
  bool field(Device& d) { return field(d.kind) && field(d.index); }
  bool done() const { return ok_ && off_ == n_; }

 private:
  template <typename E>
  bool enumeration(E* e, uint8_t max) {
    uint8_t raw;
    if (!field(raw) || raw > max) return fail();
    *e = static_cast<E>(raw);
    return true;
  }
  bool fail() {
    ok_ = false;
    return false;
  }
  const uint8_t* d_;
  size_t n_;
  size_t off_ = 0;
  bool ok_ = true;
};

// Each message's fields in wire order (R: Request or const Request, ...): a request's are
// for_each_request_field's.
template <typename IO, typename R>
bool request_fields(IO& io, R& r) {
  return for_each_request_field([&](auto m, FieldRole, auto) { return io.field(r.*m); });
}

template <typename IO, typename R>
bool response_fields(IO& io, R& r) {
  return io.field(r.op) && io.field(r.names) && io.field(r.dtype) && io.field(r.reduce_op) &&
         io.field(r.root) && io.field(r.prescale) && io.field(r.postscale) && io.field(r.device) &&
         io.field(r.process_set) && io.field(r.numels) && io.field(r.rank_rows) &&
         io.field(r.joined) && io.field(r.error);
}

}  // namespace

std::vector<uint8_t> serialize(const RequestList& l) {
  std::vector<const Request*> ptrs;
  ptrs.reserve(l.requests.size());
  for (const auto& r : l.requests) ptrs.push_back(&r);
  return serialize_requests(ptrs, l.shutdown, l.error, l.notices);
}

std::vector<uint8_t> serialize_requests(const std::vector<const Request*>& requests, bool shutdown,
                                        const std::string& error,
                                        const std::vector<std::string>& notices) {
  Writer w;
  w.field(kRequestMagic);
  w.field(static_cast<uint8_t>(shutdown ? 1 : 0));
  w.field(static_cast<uint32_t>(requests.size()));
  for (const Request* r : requests) request_fields(w, *r);
  w.field(error);
  w.field(notices);
  return w.take();
}

Result<RequestList> parse_request_list(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  uint32_t magic = 0, count = 0;
  uint8_t shut = 0;
  RequestList l;
  bool ok = rd.field(magic) && magic == kRequestMagic && rd.field(shut) && rd.field(count);
  for (uint32_t i = 0; ok && i < count; ++i) {
    Request r;
    ok = request_fields(rd, r);
    if (ok) l.requests.push_back(std::move(r));
  }
  ok = ok && rd.field(l.error) && rd.field(l.notices);
  if (!ok || !rd.done()) {
    return internal_error("malformed request list (" + std::to_string(size) + " bytes)");
  }
  l.shutdown = shut != 0;
  return l;
}

std::vector<uint8_t> serialize(const ResponseList& l) {
  Writer w;
  w.field(kResponseMagic);
  w.field(l.shutdown_ranks);
  w.field(static_cast<uint32_t>(l.responses.size()));
  for (const auto& r : l.responses) response_fields(w, r);
  w.field(l.error);
  w.field(l.shutdown_note);
  return w.take();
}

Result<ResponseList> parse_response_list(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  uint32_t magic = 0, count = 0;
  ResponseList l;
  bool ok =
      rd.field(magic) && magic == kResponseMagic && rd.field(l.shutdown_ranks) && rd.field(count);
  for (uint32_t i = 0; ok && i < count; ++i) {
    Response r;
    ok = response_fields(rd, r);
    if (ok) l.responses.push_back(std::move(r));
  }
  ok = ok && rd.field(l.error) && rd.field(l.shutdown_note);
  if (!ok || !rd.done()) {
    return internal_error("malformed response list (" + std::to_string(size) + " bytes)");
  }
  return l;
}

void copy_params(const Request& r, Response* out) {
  for_each_request_field([&](auto m, FieldRole, auto to) {
    if constexpr (!std::is_same_v<decltype(to), std::nullptr_t>) out->*to = r.*m;
    return true;
  });
}

Response response_of(const Request& r) {
  Response resp;
  copy_params(r, &resp);
  resp.names = {r.name};
  const bool by_rows =
      r.op == OpType::kAllgather || r.op == OpType::kAlltoall || r.op == OpType::kReducescatter;
  if (by_rows && !r.shape.empty()) {
    resp.numels = {shape_numel(std::vector<int64_t>(r.shape.begin() + 1, r.shape.end()))};
  } else {
    resp.numels = {shape_numel(r.shape)};
  }
  return resp;
}

std::string internal_name(const std::string& base) { return kReservedNamePrefix + base; }

std::string member_name(const std::string& group, size_t i) {
  std::string out;
  member_name_into(&out, group, i);
  return out;
}

void member_name_into(std::string* out, const std::string& group, size_t i) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, i).ptr;
  out->assign(1, kReservedNamePrefix);
  out->append(group);
  out->push_back('/');
  out->append(digits, end);
}

std::string describe(OpType op, const std::string& name) {
  const size_t slash = name.rfind('/');
  const bool member = !name.empty() && name[0] == kReservedNamePrefix &&
                      slash != std::string::npos && slash + 1 < name.size() &&
                      name.find_first_not_of("0123456789", slash + 1) == std::string::npos;
  if (!member) return std::string(op_name(op)) + " '" + name + "'";
  return std::string("grouped ") + op_name(op) + " '" + name.substr(1, slash - 1) + "' (member " +
         name.substr(slash + 1) + ")";
}

Status about(const Request& r, const Status& s) {
  return Status(s.code(), describe(r.op, r.name) + ": " + s.message());
}

}  // namespace hvd::core
