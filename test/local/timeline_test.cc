// SPDX-License-Identifier: Apache-2.0
// [local] HVD_TIMELINE: a strict-JSON Chrome trace, one row per tensor with its phases in order,
// negotiation rounds on row 0, late ranks named, every rank's own file with
// HVD_TIMELINE_ALL_RANKS, start/stop at run time.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "json_lite.h"
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

std::string temp_path(const std::string& tag) {
  return "/tmp/hvd_timeline_test_" + std::to_string(::getpid()) + "_" + tag + ".json";
}

Json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  return JsonParser(text).parse();
}

// Row (tid) of each tensor, from the thread_name metadata.
std::map<std::string, int> rows(const Json& trace) {
  std::map<std::string, int> out;
  for (const Json& e : trace.arr) {
    if (e["ph"].str == "M" && e["name"].str == "thread_name" && e["tid"].num > 0) {
      out[e["args"]["name"].str] = static_cast<int>(e["tid"].num);
    }
  }
  return out;
}

// The events of row `tid`, in file order.
std::vector<const Json*> events_of(const Json& trace, int tid) {
  std::vector<const Json*> out;
  for (const Json& e : trace.arr) {
    if (e["ph"].str != "M" && static_cast<int>(e["tid"].num) == tid) out.push_back(&e);
  }
  return out;
}

// Checks the phases of one collective of a tensor: wait, queue, collective, done, in that
// order, each starting where the previous ended (within 1 us of rounding), durations >= 0.
// Returns the wait event.
const Json* check_phases(const std::vector<const Json*>& ev, size_t first) {
  REQUIRE(ev.size() >= first + 4);
  const Json& wait = *ev[first];
  const Json& queue = *ev[first + 1];
  const Json& coll = *ev[first + 2];
  const Json& done = *ev[first + 3];
  CHECK(wait["cat"].str == "wait");
  CHECK(queue["cat"].str == "queue");
  CHECK(coll["cat"].str == "collective");
  CHECK(coll["args"]["op"].str == "allreduce");
  CHECK(coll["args"]["backend"].str == "local-test");
  CHECK(done["cat"].str == "done");
  CHECK(done["args"]["ok"].b);
  for (const Json* e : {&wait, &queue, &coll}) {
    CHECK(e->operator[]("ph").str == "X");
    CHECK(e->operator[]("dur").num >= 0);
  }
  CHECK(queue["ts"].num == Approx(wait["ts"].num + wait["dur"].num).margin(1.0));
  CHECK(coll["ts"].num == Approx(queue["ts"].num + queue["dur"].num).margin(1.0));
  CHECK(done["ts"].num == Approx(coll["ts"].num + coll["dur"].num).margin(1.0));
  CHECK(done["ph"].str == "i");
  return &wait;
}

}  // namespace

TEST_CASE("the timeline shows each tensor's phases in order and names the late rank", "[local]") {
  const std::string path = temp_path("phases");
  Config cfg;
  cfg.timeline = path;
  std::vector<double> submit_us(2);
  {
    Cluster c(2, cfg);
    c.start_all();
    for (int step = 0; step < 2; ++step) {  // step 1 goes through the response cache
      std::vector<Tensor<float>> a, late, keep;
      for (int r = 0; r < 2; ++r) {
        a.emplace_back(std::vector<float>{1.0f, 2.0f});
        late.emplace_back(std::vector<float>{3.0f});
        keep.emplace_back(std::vector<float>{5.0f});
      }
      std::vector<Handle> hs;
      for (int r = 0; r < 2; ++r) hs.push_back(submit(c[r], "tl.a", a[static_cast<size_t>(r)]));
      // Rank 1 keeps work of its own pending ("tl.keep", which rank 0 submits last), so its
      // loop goes on taking part in rounds and rank 0 sees 'tl.late' from itself only, however
      // slow the build (an idle rank 1 would sleep until its own late submission).
      hs.push_back(submit(c[1], "tl.keep", keep[1]));
      hs.push_back(submit(c[0], "tl.late", late[0]));
      std::this_thread::sleep_for(std::chrono::milliseconds(40));  // rank 1 is late
      hs.push_back(submit(c[1], "tl.late", late[1]));
      hs.push_back(submit(c[0], "tl.keep", keep[0]));
      for (auto& h : hs) await_ok(h, "timeline allreduce");
      CHECK(a[0].out == std::vector<float>{2.0f, 4.0f});
      CHECK(late[1].out == std::vector<float>{6.0f});
      CHECK(keep[0].out == std::vector<float>{10.0f});
    }
    REQUIRE(c.shutdown_all());
  }
  const Json trace = read_json(path);
  std::remove(path.c_str());
  REQUIRE(trace.kind == Json::kArray);
  auto row = rows(trace);
  REQUIRE(row.count("tl.a") == 1);
  REQUIRE(row.count("tl.late") == 1);
  for (const char* name : {"tl.a", "tl.late"}) {
    auto ev = events_of(trace, row[name]);
    REQUIRE(ev.size() == 8);  // two collectives of four events
    const Json* w0 = check_phases(ev, 0);
    const Json* w1 = check_phases(ev, 4);
    CHECK(w1->operator[]("ts").num > w0->operator[]("ts").num);
    for (const Json* e : ev) CHECK(e->operator[]("pid").num == 0);
    if (std::string(name) == "tl.late") {
      // Rank 0 waited the 40 ms rank 1 took, and negotiation named rank 1: through rank 0's
      // table the first time, through the cache's late-rank query the second time.
      CHECK(w0->operator[]("dur").num >= 35000);
      CHECK(w1->operator[]("dur").num >= 35000);
      for (const Json* w : {w0, w1}) {
        REQUIRE(w->operator[]("args").has("late_ranks"));
        const Json& lr = w->operator[]("args")["late_ranks"];
        REQUIRE(lr.arr.size() == 1);
        CHECK(lr.arr[0].num == 1);
      }
    }
  }
  // Negotiation rounds: spans on row 0, and a marker for each round that agreed on something.
  int spans = 0, markers = 0, full = 0;
  for (const Json& e : trace.arr) {
    if (e["ph"].str == "M" || e["tid"].num != 0) continue;
    if (e["cat"].str == "negotiation") {
      ++spans;
      if (e["args"]["full"].b) ++full;
    }
    if (e["cat"].str == "round") ++markers;
  }
  CHECK(markers >= 2);
  CHECK(full >= 1);
  CHECK(spans >= markers);
}

TEST_CASE("without a timeline no rank notes submission ages; with rank 0's every rank does",
          "[local]") {
  auto run_steps = [](Cluster& c) {
    for (int step = 0; step < 3; ++step) {  // steps 1 and 2 go through the response cache
      std::vector<Tensor<float>> t;
      for (int r = 0; r < 2; ++r) t.emplace_back(std::vector<float>{1.0f + static_cast<float>(r)});
      std::vector<Handle> hs;
      for (int r = 0; r < 2; ++r) hs.push_back(submit(c[r], "ages.x", t[static_cast<size_t>(r)]));
      for (auto& h : hs) await_ok(h, "allreduce");
      CHECK(t[1].out == std::vector<float>{3.0f});
    }
  };
  {
    Cluster c(2, Config{});
    c.start_all();
    run_steps(c);
    for (int r = 0; r < 2; ++r) CHECK(c[r].stats().ages_noted == 0);
    REQUIRE(c.shutdown_all());
  }
  const std::string path = temp_path("ages");
  Config cfg;
  cfg.timeline = path;
  {
    Cluster c(2, cfg);
    c.start_all();
    run_steps(c);
    // Rank 0 (which writes the file) and rank 1 (which only answers its questions) both note.
    for (int r = 0; r < 2; ++r) CHECK(c[r].stats().ages_noted > 0);
    REQUIRE(c.shutdown_all());
  }
  std::remove(path.c_str());
}

TEST_CASE("with HVD_TIMELINE_ALL_RANKS every rank writes its own file", "[local]") {
  const std::string path = temp_path("all");
  Config cfg;
  cfg.timeline = path;
  cfg.timeline_all_ranks = true;
  {
    Cluster c(3, cfg);
    c.start_all();
    std::vector<Tensor<int32_t>> t;
    for (int r = 0; r < 3; ++r) t.emplace_back(std::vector<int32_t>{r + 1});
    std::vector<Handle> hs;
    for (int r = 0; r < 3; ++r) hs.push_back(submit(c[r], "tl.all", t[static_cast<size_t>(r)]));
    for (auto& h : hs) await_ok(h, "all-ranks allreduce");
    REQUIRE(c.shutdown_all());
  }
  CHECK(core::Timeline::path_for_rank("/x/tl.json", 2) == "/x/tl.rank2.json");
  CHECK(core::Timeline::path_for_rank("/x/tl", 2) == "/x/tl.rank2");
  std::ifstream plain(path);
  CHECK_FALSE(plain.good());  // no file without the rank suffix
  for (int r = 0; r < 3; ++r) {
    const std::string p = core::Timeline::path_for_rank(path, r);
    const Json trace = read_json(p);
    std::remove(p.c_str());
    auto row = rows(trace);
    REQUIRE(row.count("tl.all") == 1);
    auto ev = events_of(trace, row["tl.all"]);
    check_phases(ev, 0);
    for (const Json* e : ev) CHECK(e->operator[]("pid").num == r);
  }
}

TEST_CASE("start_timeline and stop_timeline switch the file at run time", "[local]") {
  const std::string first = temp_path("first"), second = temp_path("second");
  {
    Cluster c(2);
    c.start_all();
    auto run = [&](const std::string& name) {
      std::vector<Tensor<float>> t;
      for (int r = 0; r < 2; ++r) t.emplace_back(std::vector<float>{1.0f});
      std::vector<Handle> hs;
      for (int r = 0; r < 2; ++r) hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)]));
      for (auto& h : hs) await_ok(h, name);
    };
    REQUIRE(c[0].start_timeline(first).ok());
    run("tl.in_first");
    REQUIRE(c[0].start_timeline(second).ok());  // closes the first
    run("tl.in_second");
    c[0].stop_timeline();
    run("tl.after_stop");
    // The first file is complete while the job still runs.
    const Json t1 = read_json(first);
    CHECK(rows(t1).count("tl.in_first") == 1);
    CHECK(rows(t1).count("tl.in_second") == 0);
    REQUIRE(c.shutdown_all());
  }
  const Json t2 = read_json(second);
  CHECK(rows(t2).count("tl.in_second") == 1);
  CHECK(rows(t2).count("tl.after_stop") == 0);
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST_CASE("process sets write their rows, rounds and late ranks to the global set's file",
          "[local]") {
  const std::string path = temp_path("sets");
  Config cfg;
  cfg.timeline = path;
  int32_t id = 0;
  {
    Cluster c(3, cfg);
    c.start_all();
    std::vector<Handle> add;
    for (int r = 0; r < 3; ++r) add.push_back(c[r].add_process_set({0, 2}));
    for (auto& h : add) await_ok(h, "add_process_set");
    id = static_cast<int32_t>(add[0].state()->result);
    Opts o;
    o.process_set = id;
    for (int step = 0; step < 2; ++step) {  // step 1: cached; its rounds answer step 0's question
      std::vector<Tensor<float>> t, g;
      for (int r = 0; r < 3; ++r) {
        t.emplace_back(std::vector<float>{1.0f + static_cast<float>(r)});
        g.emplace_back(std::vector<float>{1.0f});
      }
      std::vector<Handle> hs;
      // The same name in the global set and in the set: two rows.
      for (int r = 0; r < 3; ++r) hs.push_back(submit(c[r], "ps.x", g[static_cast<size_t>(r)]));
      hs.push_back(submit(c[0], "ps.x", t[0], o));
      // Global rank 2 (set rank 1) submits 40 ms late, its set loop idle meanwhile.
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
      hs.push_back(submit(c[2], "ps.x", t[2], o));
      for (auto& h : hs) await_ok(h, "process set allreduce");
      CHECK(t[0].out == std::vector<float>{4.0f});
      CHECK(g[1].out == std::vector<float>{3.0f});
    }
    REQUIRE(c.shutdown_all());
  }
  const Json trace = read_json(path);
  std::remove(path.c_str());
  auto row = rows(trace);
  const std::string suffix = " [process set " + std::to_string(id) + "]";
  REQUIRE(row.count("ps.x") == 1);
  REQUIRE(row.count("ps.x" + suffix) == 1);
  REQUIRE(row.count("negotiation" + suffix) == 1);
  auto ev = events_of(trace, row["ps.x" + suffix]);
  REQUIRE(ev.size() == 8);  // two collectives of four events
  for (size_t first : {size_t{0}, size_t{4}}) {
    const Json* w = check_phases(ev, first);
    CHECK(w->operator[]("dur").num >= 35000);
    // Late ranks are global ranks: set rank 1 is global rank 2.
    REQUIRE(w->operator[]("args").has("late_ranks"));
    const Json& lr = w->operator[]("args")["late_ranks"];
    REQUIRE(lr.arr.size() == 1);
    CHECK(lr.arr[0].num == 2);
    CHECK(ev[first + 2]->operator[]("args")["process_set"].num == id);
  }
  int set_rounds = 0;
  for (const Json* e : events_of(trace, row["negotiation" + suffix])) {
    if (e->operator[]("cat").str == "negotiation") {
      ++set_rounds;
      CHECK(e->operator[]("args")["process_set"].num == id);
    }
  }
  CHECK(set_rounds >= 2);
  for (const Json* e : events_of(trace, row["ps.x"]))
    CHECK_FALSE(e->operator[]("args").has("process_set"));
}
