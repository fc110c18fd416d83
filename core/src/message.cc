// SPDX-License-Identifier: Apache-2.0
// Wire format of request and response lists: little-endian, length-prefixed, bounds-checked.
#include "hvd/core/message.h"

#include <cstring>

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

bool Request::same_params(const Request& o) const {
  return op == o.op && name == o.name && dtype == o.dtype && shape == o.shape &&
         reduce_op == o.reduce_op && root == o.root && prescale == o.prescale &&
         postscale == o.postscale && device == o.device && process_set == o.process_set &&
         group == o.group && group_size == o.group_size && splits == o.splits;
}

namespace {

constexpr uint32_t kRequestMagic = 0x68764451;   // "hvDQ"
constexpr uint32_t kResponseMagic = 0x68764452;  // "hvDR"

class Writer {
 public:
  template <typename T>
  void pod(T v) {
    size_t n = buf_.size();
    buf_.resize(n + sizeof(T));
    std::memcpy(buf_.data() + n, &v, sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void i64s(const std::vector<int64_t>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) pod<int64_t>(x);
  }
  void device(const Device& d) {
    pod<uint8_t>(static_cast<uint8_t>(d.kind));
    pod<int32_t>(d.index);
  }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  template <typename T>
  bool pod(T* v) {
    if (n_ - off_ < sizeof(T)) return fail();
    std::memcpy(v, d_ + off_, sizeof(T));
    off_ += sizeof(T);
    return true;
  }
  bool str(std::string* s) {
    uint32_t len;
    if (!pod(&len) || n_ - off_ < len) return fail();
    s->assign(reinterpret_cast<const char*>(d_ + off_), len);
    off_ += len;
    return true;
  }
  bool i64s(std::vector<int64_t>* v) {
    uint32_t len;
    if (!pod(&len) || (n_ - off_) / 8 < len) return fail();
    v->resize(len);
    for (auto& x : *v) pod(&x);
    return true;
  }
  bool dtype(DataType* t) {
    uint8_t raw;
    if (!pod(&raw) || !dtype_valid(raw)) return fail();
    *t = static_cast<DataType>(raw);
    return true;
  }
  template <typename E>
  bool enumeration(E* e, uint8_t max) {
    uint8_t raw;
    if (!pod(&raw) || raw > max) return fail();
    *e = static_cast<E>(raw);
    return true;
  }
  bool device(Device* d) {
    return enumeration(&d->kind, static_cast<uint8_t>(DeviceKind::kCuda)) && pod(&d->index);
  }
  bool done() const { return ok_ && off_ == n_; }
  bool fail() {
    ok_ = false;
    return false;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t off_ = 0;
  bool ok_ = true;
};

constexpr uint8_t kMaxOp = static_cast<uint8_t>(OpType::kRemoveProcessSet);
constexpr uint8_t kMaxReduce = static_cast<uint8_t>(ReduceOp::kProduct);

}  // namespace

std::vector<uint8_t> serialize(const RequestList& l) {
  std::vector<const Request*> ptrs;
  ptrs.reserve(l.requests.size());
  for (const auto& r : l.requests) ptrs.push_back(&r);
  return serialize_requests(ptrs, l.shutdown);
}

std::vector<uint8_t> serialize_requests(const std::vector<const Request*>& requests,
                                        bool shutdown) {
  Writer w;
  w.pod(kRequestMagic);
  w.pod<uint8_t>(shutdown ? 1 : 0);
  w.pod<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const Request* rp : requests) {
    const Request& r = *rp;
    w.pod<int32_t>(r.rank);
    w.pod<uint8_t>(static_cast<uint8_t>(r.op));
    w.str(r.name);
    w.pod<uint8_t>(static_cast<uint8_t>(r.dtype));
    w.i64s(r.shape);
    w.pod<uint8_t>(static_cast<uint8_t>(r.reduce_op));
    w.pod<int32_t>(r.root);
    w.pod<double>(r.prescale);
    w.pod<double>(r.postscale);
    w.device(r.device);
    w.pod<int32_t>(r.process_set);
    w.str(r.group);
    w.pod<int32_t>(r.group_size);
    w.i64s(r.splits);
  }
  return w.take();
}

Result<RequestList> parse_request_list(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  uint32_t magic = 0, count = 0;
  uint8_t shut = 0;
  RequestList l;
  bool ok = rd.pod(&magic) && magic == kRequestMagic && rd.pod(&shut) && rd.pod(&count);
  for (uint32_t i = 0; ok && i < count; ++i) {
    Request r;
    ok = rd.pod(&r.rank) && rd.enumeration(&r.op, kMaxOp) && rd.str(&r.name) &&
         rd.dtype(&r.dtype) && rd.i64s(&r.shape) && rd.enumeration(&r.reduce_op, kMaxReduce) &&
         rd.pod(&r.root) && rd.pod(&r.prescale) && rd.pod(&r.postscale) && rd.device(&r.device) &&
         rd.pod(&r.process_set) && rd.str(&r.group) && rd.pod(&r.group_size) && rd.i64s(&r.splits);
    if (ok) l.requests.push_back(std::move(r));
  }
  if (!ok || !rd.done())
    return internal_error("malformed request list (" + std::to_string(size) + " bytes)");
  l.shutdown = shut != 0;
  return l;
}

std::vector<uint8_t> serialize(const ResponseList& l) {
  Writer w;
  w.pod(kResponseMagic);
  w.pod<uint32_t>(static_cast<uint32_t>(l.shutdown_ranks.size()));
  for (int32_t r : l.shutdown_ranks) w.pod<int32_t>(r);
  w.pod<uint32_t>(static_cast<uint32_t>(l.responses.size()));
  for (const auto& r : l.responses) {
    w.pod<uint8_t>(static_cast<uint8_t>(r.op));
    w.pod<uint32_t>(static_cast<uint32_t>(r.names.size()));
    for (const auto& n : r.names) w.str(n);
    w.pod<uint8_t>(static_cast<uint8_t>(r.dtype));
    w.pod<uint8_t>(static_cast<uint8_t>(r.reduce_op));
    w.pod<int32_t>(r.root);
    w.pod<double>(r.prescale);
    w.pod<double>(r.postscale);
    w.device(r.device);
    w.pod<int32_t>(r.process_set);
    w.i64s(r.numels);
    w.i64s(r.rank_rows);
    w.i64s(r.joined);
    w.str(r.error);
  }
  return w.take();
}

Result<ResponseList> parse_response_list(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  uint32_t magic = 0, nshut = 0, count = 0;
  ResponseList l;
  bool ok = rd.pod(&magic) && magic == kResponseMagic && rd.pod(&nshut) && nshut < (1u << 24);
  for (uint32_t i = 0; ok && i < nshut; ++i) {
    int32_t r = 0;
    ok = rd.pod(&r);
    l.shutdown_ranks.push_back(r);
  }
  ok = ok && rd.pod(&count);
  for (uint32_t i = 0; ok && i < count; ++i) {
    Response r;
    uint32_t nn = 0;
    ok = rd.enumeration(&r.op, kMaxOp) && rd.pod(&nn);
    for (uint32_t j = 0; ok && j < nn; ++j) {
      std::string s;
      ok = rd.str(&s);
      r.names.push_back(std::move(s));
    }
    ok = ok && rd.dtype(&r.dtype) && rd.enumeration(&r.reduce_op, kMaxReduce) && rd.pod(&r.root) &&
         rd.pod(&r.prescale) && rd.pod(&r.postscale) && rd.device(&r.device) &&
         rd.pod(&r.process_set) && rd.i64s(&r.numels) && rd.i64s(&r.rank_rows) &&
         rd.i64s(&r.joined) && rd.str(&r.error);
    if (ok) l.responses.push_back(std::move(r));
  }
  if (!ok || !rd.done())
    return internal_error("malformed response list (" + std::to_string(size) + " bytes)");
  return l;
}

std::string internal_name(const std::string& base) { return kReservedNamePrefix + base; }

std::string member_name(const std::string& group, size_t i) {
  return internal_name(group + "/" + std::to_string(i));
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
