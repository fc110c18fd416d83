// SPDX-License-Identifier: Apache-2.0
// The free-function API: the one place that wires MPI transport and executors into a Runtime.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "api_internal.h"
#include "api_job.h"
#include "hvd/core/elastic_config.h"
#include "hvd/core/host_buffer.h"
#include "hvd/core/logging.h"
#include "hvd/core/runtime.h"
#include "hvd/core/validation.h"
#include "hvd/hvd.h"
#include "hvd/mpi.h"
#include "hvd/ops/device.h"
#include "hvd/ops/gpu_module.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/mpi_transport.h"
#include "hvd/ops/mpi_util.h"
#include "hvd/ops/peer_monitor.h"

namespace hvd {
namespace {

using core::OpType;

// Where this process sits in the job; published with the runtime.
struct Topology {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  bool threads_multiple = false;
};

struct Global {
  std::mutex mu;  // held by init() and shutdown() for their whole run
  // Guards what user threads read: `runtime`, `topo`, `ever_initialized` (written under mu
  // and ptr_mu, read under ptr_mu only, so that a call racing shutdown() never sees a freed
  // runtime: it gets a shared reference or the documented error).
  std::mutex ptr_mu;
  std::shared_ptr<core::Runtime> runtime;
  // Counted calls hold the runtime through detail::g_counted (runtime.get() while published).
  Topology topo;
  std::shared_ptr<ops::PeerMonitor> monitor;  // shared with the transports' abort checks
  bool ever_initialized = false;
  bool we_initialized_mpi = false;
  bool atexit_registered = false;
  bool peer_died = false;  // MPI_Finalize would wait for the dead rank: skip it
  MPI_Comm negotiation = MPI_COMM_NULL, data = MPI_COMM_NULL;
  // The MPI_COMM_WORLD rank of each of hvd's ranks while initialised: an init() naming another
  // job is refused, not ignored.
  std::vector<int> job_world_ranks;
  std::mutex names_mu;
  std::map<std::pair<int32_t, int>, uint64_t> counters;  // (process set, op) -> unnamed calls
};

Global& g() {
  static Global* inst = new Global();  // never destroyed: outlives every static user
  return *inst;
}

// The published runtime and topology; throws naming `fn` when there is none.
std::shared_ptr<core::Runtime> published(const char* fn, Topology* topo = nullptr) {
  Global& s = g();
  std::lock_guard<std::mutex> lk(s.ptr_mu);
  if (!s.runtime) {
    throw Error(precondition(std::string("hvd::") + fn + "() called " +
                             (s.ever_initialized ? "after hvd::shutdown()" : "before hvd::init()") +
                             "; call hvd::init() first"));
  }
  if (topo) *topo = s.topo;
  return s.runtime;
}

Topology topology(const char* fn) {
  Topology t;
  published(fn, &t);
  return t;
}

}  // namespace

namespace detail {

std::shared_ptr<core::Runtime> runtime(const char* fn) { return published(fn); }

CountedRuntime g_counted;

RuntimeRef set_runtime_slow(const char* fn, const std::string& name, const ProcessSet& ps) {
  g_counted.calls.fetch_add(1, std::memory_order_seq_cst);
  core::Runtime* live = g_counted.live.load(std::memory_order_seq_cst);
  if (!live) end_counted_call();  // none published: runtime() throws, or (racing init) shares
  RuntimeRef rt = live ? RuntimeRef::counted(live) : RuntimeRef(runtime(fn));
  auto op = [fn] {
    std::string s(fn);
    if (s.size() > 6 && s.compare(s.size() - 6, 6, "_async") == 0) s.resize(s.size() - 6);
    return s;
  };
  // A mistake found here leaves this rank without the tensor the other ranks call: a notice
  // fails their call instead of leaving them waiting for this rank (Runtime::notice_refusal).
  auto refuse = [&rt, &ps](const Status& s) {
    rt->notice_refusal(ps.id(), s.message());
    throw Error(s);
  };
  if (!name.empty() && name[0] == core::kReservedNamePrefix) {
    Status bad = core::check_user_name(op(), name);
    if (!bad.ok()) refuse(bad);
  }
  // The common case, the global set: the reference just taken serves (no second one, which
  // cost four atomic read-modify-writes per collective on the caller's thread).
  if (ps.id() == rt->process_set_id()) return rt;
  auto r = rt->process_set(ps.id());
  if (!r.ok()) {
    refuse(Status(r.status().code(),
                  op() + (name.empty() ? "" : " '" + name + "'") + ": " + r.status().message()));
  }
  return RuntimeRef(r.value());
}

}  // namespace detail

namespace {

using detail::runtime;

void free_comms(Global& s) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (s.negotiation != MPI_COMM_NULL) MPI_Comm_free(&s.negotiation);
  if (s.data != MPI_COMM_NULL) MPI_Comm_free(&s.data);
}

void shutdown_locked(Global& s) {
  std::shared_ptr<core::Runtime> rt;
  {
    std::lock_guard<std::mutex> lk(s.ptr_mu);
    rt = s.runtime;  // stays published: calls racing the shutdown are refused by the runtime
  }
  if (!rt) return;
  rt->shutdown();
  {
    std::lock_guard<std::mutex> lk(s.ptr_mu);
    s.runtime.reset();  // later calls: "called after hvd::shutdown()"
  }
  // Counted calls still inside use the runtime `rt` keeps; they are short (the runtime refuses
  // new work now, and what they wait for fails).
  detail::g_counted.live.store(nullptr, std::memory_order_seq_cst);
  while (detail::g_counted.calls.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  bool healthy = !s.monitor || s.monitor->failure().ok();
  if (!healthy) s.peer_died = true;
  if (s.monitor) s.monitor->stop();
  s.monitor.reset();
  // A background thread stuck in a call (after an abort) keeps its runtime, and through the
  // transport's abort check the monitor, alive; the communicators stay (not healthy).
  rt.reset();
  if (healthy) free_comms(s);
  s.negotiation = s.data = MPI_COMM_NULL;
}

void at_exit() {
  Global& s = g();
  std::lock_guard<std::mutex> lk(s.mu);
  shutdown_locked(s);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (s.we_initialized_mpi && !finalized && !s.peer_died) MPI_Finalize();
}

// Initialises MPI unless someone did (then finalising it is theirs); returns the thread level.
Status init_mpi(Global& s, int* provided) {
  int inited = 0;
  MPI_Initialized(&inited);
  *provided = MPI_THREAD_SINGLE;
  if (!inited) {
    HVD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, provided));
    s.we_initialized_mpi = true;
  } else {
    MPI_Query_thread(provided);
  }
  if (!s.atexit_registered) {
    std::atexit(at_exit);
    s.atexit_registered = true;
  }
  return Status::OK();
}

Status init_locked(Global& s, const detail::JobSpec& job) {
  std::vector<std::string> unknown;
  auto cfg = core::Config::from_process_env(&unknown);
  if (!cfg.ok()) return cfg.status();
  core::set_log_level(cfg.value().log_level);
  core::HostBuffer::set_huge_pages(cfg.value().huge_pages);

  Topology t;
  int provided = MPI_THREAD_SINGLE;
  HVD_RETURN_IF_ERROR(init_mpi(s, &provided));
  if (provided < MPI_THREAD_SERIALIZED) {
    HVD_LOG(Warning) << "MPI was initialised with thread level " << provided
                     << "; hvd's background thread needs MPI_THREAD_SERIALIZED or higher";
  }
  t.threads_multiple = provided == MPI_THREAD_MULTIPLE;
  // Everything below runs on the job's communicator (MPI_COMM_WORLD unless the caller named
  // another): ranks, sizes, the peer monitor, process sets and every collective.
  auto members = detail::job_world_ranks(job);
  if (!members.ok()) return members.status();
  auto comm =
      detail::make_job_comm(job, !core::ElasticConfig::from_process_env().state_dir.empty());
  if (!comm.ok()) return comm.status();
  s.negotiation = comm.value();
  HVD_MPI_CHECK(MPI_Comm_dup(s.negotiation, &s.data));
  MPI_Comm_set_errhandler(s.negotiation, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(s.data, MPI_ERRORS_RETURN);
  MPI_Comm_rank(s.negotiation, &t.rank);
  MPI_Comm_size(s.negotiation, &t.size);
  MPI_Comm local, cross;
  HVD_MPI_CHECK(
      MPI_Comm_split_type(s.negotiation, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local));
  MPI_Comm_rank(local, &t.local_rank);
  MPI_Comm_size(local, &t.local_size);
  HVD_MPI_CHECK(MPI_Comm_split(s.negotiation, t.local_rank, t.rank, &cross));
  MPI_Comm_rank(cross, &t.cross_rank);
  MPI_Comm_size(cross, &t.cross_size);
  MPI_Comm_free(&local);
  MPI_Comm_free(&cross);

  std::string host = cfg.value().hostname;
  if (host.empty()) {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    host = buf;
  }
  const int world_rank = members.value()[static_cast<size_t>(t.rank)];
  core::set_log_prefix("[hvd " + std::to_string(t.rank) +
                       (job.kind == detail::JobSpec::Kind::kWorld
                            ? ""
                            : " (world " + std::to_string(world_rank) + ")") +
                       "@" + host + "]");
  if (t.rank == 0) {
    for (const auto& u : unknown) HVD_LOG(Warning) << "unknown variable " << u << " ignored";
    HVD_LOG(Debug) << "configuration:\n" << cfg.value().dump();
  }

  if (cfg.value().peer_monitor && t.size > 1) {
    s.monitor = std::make_shared<ops::PeerMonitor>();
    HVD_RETURN_IF_ERROR(s.monitor->start(s.negotiation, host));
  }
  // Shared: a background thread left stuck by shutdown() may still ask it.
  std::shared_ptr<ops::PeerMonitor> mon = s.monitor;
  auto should_abort = [mon]() { return mon ? mon->failure() : Status::OK(); };
  core::RuntimeParts parts;
  parts.transport = std::make_unique<ops::MpiTransport>(s.negotiation, should_abort);
  parts.host_executor =
      std::make_unique<ops::MpiExecutor>(s.data, ops::MpiExecutor::kBufferQuiet, should_abort);
  ops::add_device_executor(&parts, s.data, cfg.value(), t.local_rank, should_abort);
  parts.make_process_set = [parent = s.data, rank = t.rank, local_rank = t.local_rank,
                            multiple = t.threads_multiple, should_abort,
                            cfg = cfg.value()](int32_t id, const std::vector<int32_t>& ranks,
                                               core::RuntimeParts* out) {
    return detail::make_process_set_parts(parent, rank, local_rank, multiple, should_abort, cfg, id,
                                          ranks, out);
  };
  auto rt = std::make_shared<core::Runtime>(cfg.value(), std::move(parts));
  if (mon) {
    std::weak_ptr<core::Runtime> weak = rt;
    mon->on_failure([weak](const Status& st) {
      if (auto r = weak.lock()) r->abort(st);
    });
  }
  s.counters.clear();
  rt->start();
  std::lock_guard<std::mutex> lk(s.ptr_mu);
  detail::g_counted.live.store(rt.get(), std::memory_order_seq_cst);
  s.runtime = std::move(rt);
  s.topo = t;
  s.job_world_ranks = std::move(members).value();
  s.ever_initialized = true;
  return Status::OK();
}

// init() for every form: a no-op when hvd runs on the job asked for (plain init(): on any).
void start(const detail::JobSpec& job) {
  Global& s = g();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.runtime) {
    if (job.kind == detail::JobSpec::Kind::kWorld) return;
    auto members = detail::job_world_ranks(job);
    if (!members.ok()) {
      throw Error(Status(members.status().code(),
                         std::string(job.call()) + ": " + members.status().message()));
    }
    if (members.value() == s.job_world_ranks) return;
    throw Error(precondition(std::string(job.call()) +
                             ": hvd already runs, on another job (MPI_COMM_WORLD ranks " +
                             core::rank_ranges(s.job_world_ranks) +
                             "); call hvd::shutdown() first to start it on another"));
  }
  Status st = init_locked(s, job);
  if (!st.ok()) {
    free_comms(s);
    throw Error(Status(st.code(), std::string(job.call()) + " failed: " + st.message()));
  }
}

// "<op>.noname.<n>" with the next number of (process set, op), the same on every rank.
std::string next_noname(OpType op, int32_t process_set) {
  Global& s = g();
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lk(s.names_mu);
    n = s.counters[{process_set, static_cast<int>(op)}]++;
  }
  return std::string(core::op_name(op)) + ".noname." + std::to_string(n);
}

}  // namespace

namespace detail {

std::string auto_name(OpType op, const std::string& name, int32_t process_set) {
  if (!name.empty()) return name;
  return core::internal_name(next_noname(op, process_set));
}

void align_auto_names(core::Runtime& rt) {
  constexpr int kOps = static_cast<int>(OpType::kRemoveProcessSet) + 1;
  const int32_t set = rt.process_set_id();
  Global& s = g();
  std::vector<int64_t> counts(kOps);
  {
    std::lock_guard<std::mutex> lk(s.names_mu);
    for (int op = 0; op < kOps; ++op) counts[op] = static_cast<int64_t>(s.counters[{set, op}]);
  }
  TensorView v(counts.data(), DataType::kInt64, {kOps});
  // join() runs one at a time per set and on every rank, so a fixed name is unique.
  Handle h = submit(
      rt, allreduce_entry(rt, v, v, core::internal_name("join.names"), ReduceOp::kMax, 1.0, 1.0));
  h.wait();
  std::lock_guard<std::mutex> lk(s.names_mu);
  for (int op = 0; op < kOps; ++op) {
    uint64_t& c = s.counters[{set, op}];
    c = std::max(c, static_cast<uint64_t>(counts[op]));
  }
}

Status check_view(const core::Request& r, const TensorView& t, const char* role) {
  return check_view(r.op, r.name, t, role);
}

Status check_view(OpType op, const std::string& name, const TensorView& t, const char* role) {
  if (!view_ok(t)) {
    return invalid_argument(core::describe(op, name) + ": " + role + " data is null but shape " +
                            shape_str(t.shape) + " has " + std::to_string(t.numel()) + " elements");
  }
  return Status::OK();
}

void fill_request(core::Request* r, OpType op, const std::string& name, const TensorView& t,
                  const core::Runtime& rt) {
  r->op = op;
  r->name = name;
  r->dtype = t.dtype;
  r->shape.assign(t.shape.begin(), t.shape.end());  // keeps the slot's capacity
  r->device = t.device;
  r->rank = rt.rank();
  r->process_set = rt.process_set_id();
}

core::Request make_request(OpType op, const std::string& name, const TensorView& t,
                           const core::Runtime& rt) {
  core::Request r;
  fill_request(&r, op, name, t, rt);
  return r;
}

std::string group_name(OpType op, const std::string& name, int32_t process_set) {
  if (!name.empty()) return name;
  return core::internal_name("group." + next_noname(op, process_set));
}

void refuse_if_bad(core::TensorEntry* e, const Status& s) {
  if (!s.ok() && e->request.refused.empty()) e->request.refused = s.message();
}

std::vector<Handle> submit_group(core::Runtime& rt, size_t n, const std::string& group,
                                 const MemberFill& fill) {
  std::vector<Handle> hs;
  hs.reserve(n);
  std::string member;
  for (size_t i = 0; i < n; ++i) {
    core::member_name_into(&member, group, i);
    hs.push_back(rt.enqueue_with(member, [&](core::TensorEntry* e) {
      fill(i, member, e);
      e->request.group = group;
      e->request.group_size = static_cast<int32_t>(n);
      refuse_if_bad(e, check_view(e->request, e->input, "input"));
    }));
  }
  for (auto& h : hs) throw_if_refused(h);
  return hs;
}

Handle submit(core::Runtime& rt, core::TensorEntry e) {
  // validate_local runs once, in the runtime's enqueue; this rank's mistakes are negotiated
  // refusals (every rank's call fails, none waits for this one), thrown below.
  refuse_if_bad(&e, check_view(e.request, e.input, "input"));
  refuse_if_bad(&e, check_view(e.request, e.output, "output"));
  return throw_if_refused(rt.enqueue(std::move(e)));
}

void refuse_call(const std::string& op_word, const std::string& name, int group_size,
                 const std::string& reason, const ProcessSet& ps) {
  OpType op = OpType::kAllreduce;
  bool known = false;
  for (OpType o : {OpType::kAllreduce, OpType::kBroadcast, OpType::kAllgather, OpType::kAlltoall,
                   OpType::kReducescatter}) {
    if (op_word == core::op_name(o)) {
      op = o;
      known = true;
    }
  }
  if (!known) throw Error(invalid_argument("refuse_call: unknown collective '" + op_word + "'"));
  auto rt = set_runtime(core::op_name(op), name, ps);
  TensorView none(nullptr, DataType::kUInt8, {0});
  auto entry = [&](const std::string& n) {
    core::TensorEntry e;
    e.request = make_request(op, n, none, *rt);
    e.request.refused = core::describe(op, n) + ": " + reason;
    e.input = e.output = none;
    return e;
  };
  if (group_size <= 0) {
    submit(*rt, entry(auto_name(op, name, ps.id())));
  } else {
    submit_group(*rt, static_cast<size_t>(group_size), group_name(op, name, ps.id()),
                 [&](size_t, const std::string& member, core::TensorEntry* e) {
                   core::Runtime::fill_slot(e, entry(member));
                 });
  }
  throw Error(invalid_argument(core::describe(op, name) + ": " + reason));  // not reached
}

void refuse_call_without_set(const std::string& op_word, const std::string& name,
                             const std::string& reason) {
  auto rt = runtime(op_word.c_str());
  const std::string what = op_word + (name.empty() ? "" : " '" + name + "'") + ": " + reason;
  rt->notice_refusal(-1, what);  // -1: no such set, so every set this rank is in
  throw Error(invalid_argument(what));
}

void throw_refusal(const Handle& h) {
  // Only the runtime's own refusals: a collective that already ran and failed (a peer was
  // quick) reports through the handle like any other, never as an exception here.
  if (h.poll()) {
    Status s = h.wait_status();
    if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kPrecondition) {
      throw Error(s);
    }
  }
}

void fill_allreduce(core::TensorEntry* e, const core::Runtime& rt, const TensorView& in,
                    const TensorView& out, const std::string& name, ReduceOp op, double pre,
                    double post) {
  fill_request(&e->request, OpType::kAllreduce, name, in, rt);
  e->request.reduce_op = op;
  e->request.prescale = pre;
  e->request.postscale = post;
  e->input = in;
  e->output = out;
}

namespace {
// refill_allreduce() of a changed request, apart: the common path then calls nothing.
__attribute__((noinline)) bool refill_changed(core::TensorEntry* e, const core::Runtime& rt,
                                              const TensorView& in, const TensorView& out,
                                              const std::string& name, ReduceOp op, double pre,
                                              double post) {
  core::reset_for_reuse(e);
  fill_allreduce(e, rt, in, out, name, op, pre, post);
  return false;
}
}  // namespace

bool refill_allreduce(core::TensorEntry* e, const core::Runtime& rt, const TensorView& in,
                      const TensorView& out, const std::string& name, ReduceOp op, double pre,
                      double post) {
  static_assert(core::request_field_count() == 15,
                "Request has a new field: compare it here (and set it in fill_allreduce)");
  const core::Request& q = e->request;
  const bool same = q.op == OpType::kAllreduce && same_text(q.name, name) && q.dtype == in.dtype &&
                    q.shape == in.shape && q.reduce_op == op && q.root == 0 && q.prescale == pre &&
                    q.postscale == post && q.device == in.device &&
                    q.process_set == rt.process_set_id() && q.rank == rt.rank() &&
                    q.group.empty() && q.group_size == 0 && q.splits.empty() && q.refused.empty();
  if (!same) return refill_changed(e, rt, in, out, name, op, pre, post);
  // The input was set with the request: its dtype, shape and device are the ones just
  // compared, so only the buffer changes. The output may have had another shape.
  e->input.data = in.data;
  e->input.stream = in.stream;
  e->input.ready_event = in.ready_event;
  if (&out == &in && e->output.dtype == in.dtype && e->output.device == in.device &&
      e->output.shape == e->input.shape) {  // in place, as last time: the buffer alone
    e->output.data = in.data;
    e->output.stream = in.stream;
    e->output.ready_event = in.ready_event;
  } else {
    core::assign_view(&e->output, out);
  }
  return true;
}

core::TensorEntry allreduce_entry(const core::Runtime& rt, const TensorView& in,
                                  const TensorView& out, const std::string& name, ReduceOp op,
                                  double pre, double post) {
  core::TensorEntry e;
  fill_allreduce(&e, rt, in, out, name, op, pre, post);
  return e;
}

}  // namespace detail

using detail::auto_name;
using detail::make_request;
using detail::set_runtime;
using detail::submit;

void init() { start(detail::JobSpec{}); }

void init(MPI_Comm comm) {
  detail::JobSpec job;
  job.kind = detail::JobSpec::Kind::kComm;
  job.comm = comm;
  start(job);
}

void init_on_ranks(const std::vector<int>& world_ranks) {
  detail::JobSpec job;
  job.kind = detail::JobSpec::Kind::kRanks;
  job.ranks = world_ranks;
  start(job);
}

void shutdown() {
  Global& s = g();
  std::lock_guard<std::mutex> lk(s.mu);
  shutdown_locked(s);
}

bool is_initialized() {
  Global& s = g();
  std::lock_guard<std::mutex> lk(s.ptr_mu);
  return s.runtime != nullptr;
}

int rank() { return topology("rank").rank; }
int size() { return topology("size").size; }
int local_rank() { return topology("local_rank").local_rank; }
int local_size() { return topology("local_size").local_size; }
int cross_rank() { return topology("cross_rank").cross_rank; }
int cross_size() { return topology("cross_size").cross_size; }
bool mpi_threads_supported() { return topology("mpi_threads_supported").threads_multiple; }

bool mpi_built() { return true; }
bool nccl_built() { return ops::gpu_module().api != nullptr; }
bool cuda_built() { return nccl_built(); }
int nccl_version() {
  const ops::GpuModuleState& m = ops::gpu_module();
  return m.api ? m.api->nccl_version : 0;
}

GpuSupport gpu_support() {
  const ops::GpuModuleState& m = ops::gpu_module();
  GpuSupport g;
  g.module = m.path;
  g.reason = m.reason;
  if (m.api == nullptr) return g;
  g.loaded = true;
  g.nccl_version = m.api->nccl_version;
  g.cuda_runtime_version = m.api->cuda_runtime_version;
  auto count = m.api->device_count();
  if (count.ok()) {
    g.devices = count.value();
  } else {
    g.reason = count.status().message();
  }
  return g;
}
bool torch_built() { return HVD_HAVE_TORCH != 0; }

Handle allreduce_async(const TensorView& tensor, const std::string& name, ReduceOp op,
                       double prescale_factor, double postscale_factor, const ProcessSet& ps) {
  return allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, ps);
}

Handle allreduce_async(const TensorView& input, const TensorView& output, const std::string& name,
                       ReduceOp op, double prescale_factor, double postscale_factor,
                       const ProcessSet& ps) {
  auto rt = set_runtime("allreduce_async", name, ps);
  std::string generated;  // the hot path copies `name` only into the table entry
  if (name.empty()) generated = auto_name(OpType::kAllreduce, name, ps.id());
  const std::string& n = name.empty() ? generated : name;
  // This rank's mistakes are negotiated refusals: every rank's call fails (see submit()).
  // Checked inline; the message is built only for a mistake.
  const bool in_place = &input == &output;
  Status bad;
  if (!in_place && (output.dtype != input.dtype || output.numel() != input.numel())) {
    bad = invalid_argument("allreduce '" + n + "': output " + dtype_name(output.dtype) +
                           shape_str(output.shape) + " does not match input " +
                           dtype_name(input.dtype) + shape_str(input.shape));
  } else if (!detail::view_ok(input)) {
    bad = detail::check_view(OpType::kAllreduce, n, input, "input");
  } else if (!in_place && !detail::view_ok(output)) {
    bad = detail::check_view(OpType::kAllreduce, n, output, "output");
  }
  // In place in the table slot of `n` (no entry to move); validated once, by the runtime.
  core::Runtime& r = *rt;
  return detail::throw_if_refused(r.enqueue_refill(n, [&](core::TensorEntry* e) {
    const bool same =
        detail::refill_allreduce(e, r, input, output, n, op, prescale_factor, postscale_factor);
    if (bad.ok()) return same;
    e->request.refused = bad.message();  // a changed request: negotiated as a refusal
    return false;
  }));
}

Handle grouped_allreduce_async(const std::vector<TensorView>& tensors, const std::string& name,
                               ReduceOp op, double prescale_factor, double postscale_factor,
                               const ProcessSet& ps) {
  if (tensors.empty()) detail::refuse_call("allreduce", name, 1, "an empty list of tensors", ps);
  auto rt = set_runtime("grouped_allreduce_async", name, ps);
  const std::string group = detail::group_name(OpType::kAllreduce, name, ps.id());
  core::Runtime& r = *rt;
  auto handles = detail::submit_group(
      r, tensors.size(), group, [&](size_t i, const std::string& member, core::TensorEntry* e) {
        detail::fill_allreduce(e, r, tensors[i], tensors[i], member, op, prescale_factor,
                               postscale_factor);
      });
  return core::join_handles(handles);
}

Handle broadcast_async(const TensorView& tensor, int root_rank, const std::string& name,
                       const ProcessSet& ps) {
  auto rt = set_runtime("broadcast_async", name, ps);
  core::TensorEntry e;
  e.request =
      make_request(OpType::kBroadcast, auto_name(OpType::kBroadcast, name, ps.id()), tensor, *rt);
  e.request.root = root_rank;
  e.input = tensor;
  e.output = tensor;
  return submit(*rt, std::move(e));
}

void allreduce(const TensorView& tensor, const std::string& name, ReduceOp op,
               double prescale_factor, double postscale_factor, const ProcessSet& ps) {
  allreduce_async(tensor, name, op, prescale_factor, postscale_factor, ps).wait();
}

void grouped_allreduce(const std::vector<TensorView>& tensors, const std::string& name, ReduceOp op,
                       double prescale_factor, double postscale_factor, const ProcessSet& ps) {
  grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor, ps).wait();
}

void broadcast(const TensorView& tensor, int root_rank, const std::string& name,
               const ProcessSet& ps) {
  broadcast_async(tensor, root_rank, name, ps).wait();
}

void barrier(const ProcessSet& ps) {
  auto rt = set_runtime("barrier", "", ps);
  core::TensorEntry e;
  TensorView none(nullptr, DataType::kUInt8, {0});
  e.request = make_request(OpType::kBarrier, auto_name(OpType::kBarrier, "", ps.id()), none, *rt);
  e.input = e.output = none;
  submit(*rt, std::move(e)).wait();
}

void start_timeline(const std::string& path, bool mark_cycles) {
  throw_if_error(runtime("start_timeline")->start_timeline(path, mark_cycles));
}

void stop_timeline() { runtime("stop_timeline")->stop_timeline(); }

RuntimeStats runtime_stats() {
  const auto rt = runtime("runtime_stats");
  const auto& st = rt->stats();
  RuntimeStats out;
  out.rounds = st.rounds.load();
  out.full_rounds = st.full_rounds.load();
  out.responses = st.responses.load();
  out.fused_batches = st.fused_batches.load();
  return out;
}

bool poll(const Handle& h) { return h.poll(); }
void wait(const Handle& h) { h.wait(); }
void synchronize(const Handle& h) { h.wait(); }

}  // namespace hvd
