// SPDX-License-Identifier: Apache-2.0
// [fuzz] libFuzzer target for the negotiation wire format (core/src/message.cc). The first byte
// picks the parser (even: request list, odd: response list), the rest is the message. A
// corrupted or truncated message must give an error status, never a crash or a read past the
// buffer (ASan); a message that parses must serialize to bytes that parse to the same lists.
// Built with -DHVD_FUZZ_WRITE_SEEDS it writes the seed corpus (real messages) instead.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/core/message.h"

using namespace hvd;
using namespace hvd::core;

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "message_fuzzer: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool response = data[0] & 1;
  // An exact-size heap copy: ASan reports any read past the message.
  std::vector<uint8_t> msg(data + 1, data + size);
  const uint8_t* p = msg.empty() ? nullptr : msg.data();
  if (!response) {
    auto l = parse_request_list(p, msg.size());
    if (!l.ok()) {
      require(!l.status().message().empty(), "an error status without a message");
      return 0;
    }
    std::vector<uint8_t> again = serialize(l.value());
    auto l2 = parse_request_list(again.data(), again.size());
    require(l2.ok(), "a parsed request list does not parse again");
    require(l2.value().requests.size() == l.value().requests.size(), "request count changed");
    for (size_t i = 0; i < l.value().requests.size(); ++i) {
      require(l2.value().requests[i].same_params(l.value().requests[i]) ||
                  l.value().requests[i].prescale != l.value().requests[i].prescale ||
                  l.value().requests[i].postscale != l.value().requests[i].postscale,
              "a request changed through serialize/parse");
      require(l2.value().requests[i].refused == l.value().requests[i].refused,
              "a request's refusal changed through serialize/parse");
    }
    require(l2.value().error == l.value().error, "request list error changed");
  } else {
    auto l = parse_response_list(p, msg.size());
    if (!l.ok()) {
      require(!l.status().message().empty(), "an error status without a message");
      return 0;
    }
    std::vector<uint8_t> again = serialize(l.value());
    auto l2 = parse_response_list(again.data(), again.size());
    require(l2.ok(), "a parsed response list does not parse again");
    require(l2.value().responses.size() == l.value().responses.size(), "response count changed");
    require(l2.value().shutdown_ranks == l.value().shutdown_ranks, "shutdown ranks changed");
    for (size_t i = 0; i < l.value().responses.size(); ++i) {
      const Response &a = l.value().responses[i], &b = l2.value().responses[i];
      require(a.names == b.names && a.numels == b.numels && a.rank_rows == b.rank_rows &&
                  a.joined == b.joined && a.error == b.error && a.op == b.op,
              "a response changed through serialize/parse");
    }
  }
  return 0;
}

#ifdef HVD_FUZZ_WRITE_SEEDS
// Writes real messages of every kind to DIR/seed-*: hvd_message_seeds DIR
int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int k = 0;
  auto write = [&](uint8_t selector, const std::vector<uint8_t>& bytes) {
    std::string path = std::string(argv[1]) + "/seed-" + std::to_string(k++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::exit(1);
    std::fwrite(&selector, 1, 1, f);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  RequestList rl;
  write(0, serialize(rl));
  Request a;
  a.name = "layer1.weight";
  a.shape = {64, 32};
  a.reduce_op = ReduceOp::kAverage;
  a.prescale = 0.5;
  rl.requests.push_back(a);
  Request g = a;
  g.op = OpType::kAlltoall;
  g.name = member_name("g", 1);
  g.group = "g";
  g.group_size = 2;
  g.splits = {1, 2, 3};
  g.dtype = DataType::kBFloat16;
  g.device = Device{DeviceKind::kCuda, 1};
  rl.requests.push_back(g);
  Request refused = a;
  refused.op = OpType::kBroadcast;
  refused.name = "w";
  refused.root = 9;
  refused.refused = "broadcast 'w': root rank 9 is out of range (process set has 2 ranks: 0-1)";
  rl.requests.push_back(refused);
  write(0, serialize(rl));
  rl.shutdown = true;
  rl.error = "rank 1: something threw";
  write(0, serialize(rl));
  ResponseList pl;
  write(1, serialize(pl));
  Response r;
  r.names = {"a", "b"};
  r.numels = {4, 5};
  r.dtype = DataType::kFloat16;
  pl.responses.push_back(r);
  Response ag;
  ag.op = OpType::kAllgather;
  ag.names = {"x"};
  ag.numels = {3};
  ag.rank_rows = {1, 0, 2, 5};
  ag.joined = {2};
  pl.responses.push_back(ag);
  Response err;
  err.op = OpType::kBroadcast;
  err.names = {"w"};
  err.error = "broadcast 'w': root 0 on rank 0 but 1 on rank 1";
  pl.responses.push_back(err);
  pl.shutdown_ranks = {0, 3};
  write(1, serialize(pl));
  pl.error = "hvd stopped on every rank: rank 2: out of memory";
  write(1, serialize(pl));
  return 0;
}
#endif
