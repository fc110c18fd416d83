# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.torch.elastic inside one generation: commit/restore/sync of TorchState and
ObjectState, resuming from the newest committed snapshot (the ranks agree on it, the lowest rank
holding it broadcasts, every rank runs the reset callbacks), ElasticSampler's coverage across a
restart, the snapshot file under kill -9 during commit, and its authentication: a snapshot written
without the job's key (HVD_ELASTIC_KEY), damaged or in an older format, or a state directory that
is not private, raises ElasticStateError naming it and nothing of it is unpickled. Every expected
value is recomputed on each rank from seeds. Real process deaths under hvdrun are the [elastic] tier
(test/elastic)."""
import errno
import hashlib
import hmac
import os
import pickle
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import pytest
import torch
import torch.nn as nn

import hvd.torch as hvd
from hvd.common import elastic as common_elastic
from hvd.common import elastic_snapshot as snap

#: The job's snapshot key in these tests (hvdrun makes a random one per job).
KEY = bytes(range(32))


@pytest.fixture(autouse=True)
def _elastic_key(monkeypatch):
    monkeypatch.setenv("HVD_ELASTIC_KEY", KEY.hex())


def snapshot_bytes(commit_id, world_size, payload, key):
    """A format-2 snapshot file, written here independently of hvd: "HVDSNAP2", commit id,
    world size, payload length (u64 little endian), HMAC-SHA256 under `key` of those 32 bytes and
    the payload, then the payload."""
    header = struct.pack("<8sQQQ", b"HVDSNAP2", commit_id, world_size, len(payload))
    return header + hmac.new(key, header + payload, hashlib.sha256).digest() + payload


def format1_bytes(commit_id, world_size, payload):
    """A snapshot of the format before authentication: "HVDSNAP1", ids, length, CRC-32."""
    return struct.pack("<8sQQQI", b"HVDSNAP1", commit_id, world_size, len(payload),
                       zlib.crc32(payload)) + payload


class Plant:
    """What a planted payload does: unpickling it creates the file `path`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def model_of(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()


def trained(seed, steps):
    """(model, optimizer) after `steps` SGD-with-momentum steps on data drawn from `seed`."""
    model = model_of(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 3, dtype=torch.float64, generator=g)).pow(2).sum().backward()
        opt.step()
    return model, opt


def assert_same_model(a, b):
    for (na, ta), (nb, tb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb
        assert torch.equal(ta, tb), na


def assert_same_momentum(opt_a, opt_b):
    sa, sb = opt_a.state_dict()["state"], opt_b.state_dict()["state"]
    assert sorted(sa) == sorted(sb)
    for k in sa:
        assert torch.equal(sa[k]["momentum_buffer"], sb[k]["momentum_buffer"]), k


@pytest.fixture
def shared_dir():
    """A directory in /dev/shm, the same on every rank (created by rank 0)."""
    name = tempfile.mkdtemp(prefix="hvd-elastic-test-", dir="/dev/shm") if hvd.rank() == 0 else None
    name = hvd.broadcast_object(name, root_rank=0, name="shared_dir")
    yield name
    hvd.barrier()
    if hvd.rank() == 0:
        shutil.rmtree(name, ignore_errors=True)


def test_object_state_commit_then_restore_returns_to_the_commit():
    state = hvd.elastic.ObjectState(epoch=0, seen=[])
    state.epoch, state.seen = 3, [1, 2]
    state.commit()
    state.epoch = 4
    state.seen.append(3)
    state.restore()
    assert (state.epoch, state.seen, state.commit_id) == (3, [1, 2], 1)
    state.seen.append(9)  # restore() hands out copies: the commit stays as it was
    state.restore()
    assert state.seen == [1, 2]


def test_torch_state_restore_brings_back_committed_parameters_and_momentum():
    model, opt = trained(hvd.rank(), steps=2)
    state = hvd.elastic.TorchState(model, opt, batch=7)
    state.commit()
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
        opt.step()
    state.batch = 99
    state.restore()
    ref_model, ref_opt = trained(hvd.rank(), steps=2)
    assert_same_model(model, ref_model)
    assert_same_momentum(opt, ref_opt)
    assert state.batch == 7


def test_commits_reuse_the_saved_tensors_and_restores_never_alias_them():
    model, opt = trained(hvd.rank(), steps=2)
    state = hvd.elastic.TorchState(model, opt)
    handlers = state._handlers
    saved_model = {k: t.data_ptr() for k, t in handlers["model"].saved.items()}

    def train(steps):
        for _ in range(steps):
            opt.zero_grad()
            model(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
            opt.step()

    train(1)
    state.commit()
    committed = ([t.clone() for t in model.state_dict().values()],
                 [v["momentum_buffer"].clone() for v in opt.state_dict()["state"].values()])
    # The second save wrote into the first one's tensors (no new allocation per commit).
    assert {k: t.data_ptr() for k, t in handlers["model"].saved.items()} == saved_model
    momentum = [v["momentum_buffer"].data_ptr()
                for v in handlers["optimizer"].saved["state"].values()]
    state.commit()
    assert [v["momentum_buffer"].data_ptr()
            for v in handlers["optimizer"].saved["state"].values()] == momentum
    for _ in range(2):  # restore, train, restore: training after a restore leaves the commit be
        train(2)
        state.restore()
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), committed[0]))
        assert all(torch.equal(v["momentum_buffer"], m)
                   for v, m in zip(opt.state_dict()["state"].values(), committed[1]))


def test_the_snapshot_payload_brings_back_every_tensor_and_structure():
    from collections import OrderedDict

    from hvd.torch.elastic import saved
    g = torch.Generator().manual_seed(7)
    tensors = {str(d): (torch.randn(3, 4, generator=g) * 9).to(d)
               for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                         torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64)}
    tensors["zero-dim"] = torch.tensor(5.5)
    tensors["empty"] = torch.zeros(0, 3, dtype=torch.int16)
    tensors["transposed"] = torch.arange(12.0).reshape(3, 4).t()
    tensors["grad"] = torch.ones(2, requires_grad=True)  # pickled by torch itself
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    obj = {"tensors": tensors, "model": model.state_dict(), "set": {3, 1, 2},
           "nested": [(1, "a", None), OrderedDict(b=torch.ones(2))], "epoch": 4}
    payload = saved.dumps(obj)
    back = saved.loads(payload)
    assert set(back["tensors"]) == set(tensors)
    for name, t in tensors.items():
        got = back["tensors"][name]
        assert (got.dtype, got.shape) == (t.dtype, t.shape), name
        assert torch.equal(got, t.detach()), name
    assert back["tensors"]["grad"].requires_grad
    assert back["set"] == {1, 2, 3} and back["epoch"] == 4
    assert back["nested"][0] == (1, "a", None) and torch.equal(back["nested"][1]["b"],
                                                                torch.ones(2))
    assert type(back["model"]) is OrderedDict
    assert back["model"]._metadata == obj["model"]._metadata  # modules' versions
    fresh = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    fresh.load_state_dict(back["model"])
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    # The tensors' bytes follow the pickle whole: the payload is barely larger than them.
    raw = sum(t.numel() * t.element_size() for t in tensors.values())
    assert len(payload) < raw + 4096
    # A payload of torch.save loads too.
    import io
    buf = io.BytesIO()
    torch.save({"a": torch.ones(3)}, buf)
    assert torch.equal(saved.loads(buf.getvalue())["a"], torch.ones(3))


def test_torch_state_sync_makes_every_rank_equal_to_rank_0():
    model, opt = trained(hvd.rank(), steps=hvd.rank() + 1)
    state = hvd.elastic.TorchState(model, opt, epoch=hvd.rank() + 10)
    state.sync()
    ref_model, ref_opt = trained(0, steps=1)
    assert_same_model(model, ref_model)
    assert_same_momentum(opt, ref_opt)
    assert state.epoch == 10


def test_handler_registry_serves_other_state_types():
    class Counter:
        def __init__(self):
            self.n = 0

    class CounterHandler(hvd.elastic.StateHandler):
        def __init__(self, value):
            super().__init__(value)
            self.save()

        def save(self):
            self.saved = self.value.n

        def restore(self):
            self.value.n = self.saved

        def sync(self):
            self.value.n = hvd.broadcast_object(self.value.n, root_rank=0, name="counter")

    old = hvd.elastic.get_handler_registry()
    hvd.elastic.set_handler_registry(old + [(Counter, CounterHandler)])
    try:
        counter = Counter()
        counter.n = hvd.rank() + 5
        state = hvd.elastic.TorchState(counter=counter)
        state.sync()
        assert counter.n == 5
        counter.n = 8
        state.commit()
        counter.n = 1
        state.restore()
        assert counter.n == 8
    finally:
        hvd.elastic.set_handler_registry(old)


def test_host_update_seen_by_rank_0_interrupts_every_rank_at_the_same_commit():
    state = hvd.elastic.ObjectState(step=0)
    state.commit()
    if hvd.rank() == 0:
        state.on_hosts_updated(time.time(), hvd.elastic.HostUpdateResult.added)
    with pytest.raises(hvd.HostsUpdatedInterrupt) as info:
        state.commit()
    assert info.value.skip_sync is True
    state.commit()  # the update was consumed: no second interrupt


def test_host_change_from_hvdrun_interrupts_every_rank_once_per_change(tmp_path, monkeypatch):
    # hvdrun's wrapper writes "<seq> <bits>" to $HVD_ELASTIC_HOSTS_FILE; only rank 0 reads it.
    path = tmp_path / "hosts"
    monkeypatch.setenv("HVD_ELASTIC_HOSTS_FILE", str(path))
    state = hvd.elastic.ObjectState(step=0)
    state.commit()  # no file yet: nothing happens
    path.write_text(f"1 {hvd.elastic.HostUpdateResult.removed}\n" if hvd.rank() == 0 else "junk")
    with pytest.raises(hvd.HostsUpdatedInterrupt) as info:
        state.commit()
    assert info.value.skip_sync is False  # a removal: not only additions
    state.commit()  # the same seq again: no second interrupt
    if hvd.rank() == 0:
        path.write_text(f"2 {hvd.elastic.HostUpdateResult.added}\n")
    with pytest.raises(hvd.HostsUpdatedInterrupt) as info:
        state.check_host_updates()
    assert info.value.skip_sync is True


def committed_payload(seed, steps, batch):
    """The snapshot bytes of a TorchState committed after `steps` steps from `seed`."""
    model, opt = trained(seed, steps)
    state = hvd.elastic.TorchState(model, opt, batch=batch)
    state.save()
    return state._dumps()


@pytest.mark.ranks(2, "ranks holding different commits")
def test_resume_takes_the_newest_commit_from_the_lowest_rank_holding_it(shared_dir, monkeypatch,
                                                                        tmp_path):
    # Every rank its own "host" directory. Commit ids per rank: 3, 5, none, 5 (np 4); the two
    # holders of 5 hold different bytes so that the test sees which one was broadcast.
    ids = {0: 3, 1: 5, 3: 5}
    mine = os.path.join(shared_dir, f"host{hvd.rank()}")
    os.makedirs(mine, mode=0o700, exist_ok=True)  # as hvdrun's rank wrapper does
    if hvd.rank() in ids:
        snap.write_snapshot(mine, ids[hvd.rank()], hvd.size(),
                            committed_payload(hvd.rank(), steps=hvd.rank() + 1, batch=hvd.rank()))
    done = tmp_path / "done"
    monkeypatch.setenv("HVD_ELASTIC_STATE_DIR", mine)
    monkeypatch.setenv("HVD_ELASTIC_COMPLETION_FILE", str(done))
    model, opt = trained(50 + hvd.rank(), steps=1)
    state = hvd.elastic.TorchState(model, opt, batch=-1)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(state.batch)])

    @hvd.elastic.run
    def train(state, tag):
        assert not done.exists()
        return tag, state.commit_id, state.batch

    assert train(state, "t") == ("t", 5, 1)
    assert resets == [1]
    ref_model, ref_opt = trained(1, steps=2)
    assert_same_model(model, ref_model)
    assert_same_momentum(opt, ref_opt)
    assert done.read_text() == "done\n"
    state.commit()  # ids go on from the resumed one; only local rank 0 writes the host's file
    if hvd.local_rank() == 0:
        assert snap.read_snapshot(mine).commit_id == 6


def test_without_any_snapshot_the_state_syncs_from_rank_0_and_no_reset_runs(shared_dir,
                                                                           monkeypatch):
    os.makedirs(os.path.join(shared_dir, "empty"), mode=0o700, exist_ok=True)  # the wrapper's job
    monkeypatch.setenv("HVD_ELASTIC_STATE_DIR", os.path.join(shared_dir, "empty"))
    model, opt = trained(hvd.rank(), steps=1)
    state = hvd.elastic.TorchState(model, opt, epoch=hvd.rank())
    resets = []
    state.register_reset_callbacks([lambda: resets.append(1)])
    assert hvd.elastic.run(lambda s: (s.epoch, s.commit_id))(state) == (0, 0)
    assert resets == []
    assert_same_model(model, trained(0, steps=1)[0])


def test_outside_elastic_mode_a_collective_failure_propagates(monkeypatch):
    monkeypatch.delenv("HVD_ELASTIC_STATE_DIR", raising=False)

    @hvd.elastic.run
    def fails(state):
        raise hvd.HorovodInternalError("lost a peer")

    with pytest.raises(hvd.HorovodInternalError, match="lost a peer"):
        fails(hvd.elastic.ObjectState(x=1))


def samplers(monkeypatch, n, size, epoch=None, state=None):
    """The samplers of every rank of a world of `size`, computed on this one process."""
    out = []
    with monkeypatch.context() as m:
        for r in range(size):
            m.setattr(hvd.elastic.sampler.basics, "size", lambda s=size: s)
            m.setattr(hvd.elastic.sampler.basics, "rank", lambda r=r: r)
            s = hvd.elastic.ElasticSampler(list(range(n)), shuffle=True, seed=7)
            if epoch is not None:
                s.set_epoch(epoch)
            if state is not None:
                s.load_state_dict(state)
            out.append(s)
    return out


@pytest.mark.parametrize("sizes", [(2, 2), (4, 3), (3, 4)], ids=["2to2", "4to3", "3to4"])
def test_sampler_covers_every_sample_once_per_epoch_across_a_restart(monkeypatch, sizes):
    n, batch = 23, 2
    before, after = sizes
    gen1 = samplers(monkeypatch, n, before, epoch=1)
    committed = set()
    for b in range(4):  # batches 0..2 committed; batch 3 processed, then lost with a rank
        for s in gen1:
            s.record_batch(b, batch)
            if b <= 2:
                committed.update(s.get_indices(b, batch))
        if b == 2:
            state = gen1[0].state_dict()
    assert state["processed_indices"] == committed  # one rank's record holds every rank's
    assert state["epoch"] == 1
    gen2 = samplers(monkeypatch, n, after, state=state)
    seen = [i for s in gen2 for i in s]
    assert len({len(s) for s in gen2}) == 1
    assert set(seen) | committed == set(range(n))
    assert not set(seen) & committed
    assert len(seen) - len(set(seen)) == gen2[0].total_size - (n - len(committed))
    # Same epoch and seed: gen 1's order minus what was committed.
    assert gen2[0].remaining_indices == [i for i in gen1[0].remaining_indices
                                         if i not in committed]


def test_sampler_state_travels_in_the_snapshot_and_partitions_for_this_world(shared_dir,
                                                                              monkeypatch):
    n, batch = 37, 3
    os.makedirs(os.path.join(shared_dir, "sampler"), mode=0o700, exist_ok=True)  # the wrapper's
    monkeypatch.setenv("HVD_ELASTIC_STATE_DIR", os.path.join(shared_dir, "sampler"))
    sampler = hvd.elastic.ElasticSampler(list(range(n)), seed=3)
    state = hvd.elastic.TorchState(sampler=sampler, epoch=0)
    sampler.set_epoch(2)
    state.epoch = 2
    for b in range(2):
        sampler.record_batch(b, batch)
    state.commit()
    committed = set(sampler.processed_indices)
    assert len(committed) == 2 * batch * hvd.size()
    # The next generation: fresh objects, resumed from the file.
    fresh = hvd.elastic.ElasticSampler(list(range(n)), seed=3)
    state2 = hvd.elastic.TorchState(sampler=fresh, epoch=0)
    hvd.elastic.run(lambda s: None)(state2)
    assert (state2.epoch, fresh.epoch, fresh.processed_indices) == (2, 2, committed)
    mine = hvd.allgather_object(list(fresh), name="sampler_rest")
    rest = [i for part in mine for i in part]
    assert set(rest) == set(range(n)) - committed


WRITER = r"""
import sys
from hvd.common import elastic_snapshot as snap
d, size = sys.argv[1], int(sys.argv[2])
i = 0
print("ready", flush=True)
while True:
    i += 1
    snap.write_snapshot(d, i, 4, bytes([i % 251]) * (size + i % 7))
    if i == 1:
        print("wrote", flush=True)
"""


def test_kill_during_commit_never_leaves_a_torn_snapshot(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    rng = random.Random(hvd.rank())
    size = 2 << 20
    kills = 0
    for attempt in range(12):
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(size)], env=env,
                             stdout=subprocess.PIPE)
        assert p.stdout.readline() == b"ready\n"
        if attempt % 2:  # every other writer is killed only once its first commit is whole
            assert p.stdout.readline() == b"wrote\n"  # (a loaded machine writes slowly)
        time.sleep(rng.uniform(0.0, 0.05))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        got = snap.read_snapshot(str(tmp_path))
        if got is None:  # killed before its first rename
            assert not os.path.exists(snap.snapshot_path(str(tmp_path)))
            continue
        kills += 1
        assert got.world_size == 4
        assert got.payload == bytes([got.commit_id % 251]) * (size + got.commit_id % 7)
        snap.remove_stale_temporaries(str(tmp_path))
        assert os.listdir(tmp_path) == [snap.FILE_NAME]
    assert kills > 0


def test_a_snapshot_is_authenticated_with_the_jobs_key(tmp_path):
    d = str(tmp_path)  # pytest makes it 0700: a private directory
    snap.write_snapshot(d, 9, 2, b"x" * 100)
    with open(snap.snapshot_path(d), "rb") as f:
        assert f.read() == snapshot_bytes(9, 2, b"x" * 100, KEY)
    with open(snap.snapshot_path(d), "wb") as f:
        f.write(snapshot_bytes(11, 3, b"written here", KEY))
    assert snap.read_snapshot(d) == (11, 3, b"written here")


@pytest.mark.parametrize("damage", ["payload bit", "commit id", "truncated", "wrong key"])
def test_a_damaged_snapshot_raises_elastic_state_error_naming_it(tmp_path, damage):
    d = str(tmp_path)
    path = snap.snapshot_path(d)
    data = bytearray(snapshot_bytes(9, 2, b"x" * 100, KEY))
    if damage == "payload bit":
        data[-1] ^= 1
    elif damage == "commit id":
        data[8] = 10
    elif damage == "truncated":
        del data[-1]
    else:
        data = snapshot_bytes(9, 2, b"x" * 100, bytes(32))
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(hvd.elastic.ElasticStateError) as info:
        snap.read_snapshot(d)
    assert f"refusing the snapshot '{path}': " in str(info.value)
    why = "it is truncated" if damage == "truncated" else "its HMAC-SHA256 does not verify"
    assert why in str(info.value)
    assert not isinstance(info.value, hvd.HorovodInternalError)  # no restart can fix it


def test_a_state_directory_open_to_others_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    snap.write_snapshot(str(d), 1, 1, b"p")
    d.chmod(0o755)
    with pytest.raises(hvd.elastic.ElasticStateError,
                       match=f"refusing the state directory: '{d}' has mode 0755, not 0700"):
        snap.read_snapshot(str(d))
    with pytest.raises(hvd.elastic.ElasticStateError, match="has mode 0755"):
        snap.write_snapshot(str(d), 2, 1, b"q")


def test_a_state_directory_without_the_key_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("HVD_ELASTIC_KEY")
    with pytest.raises(hvd.elastic.ElasticStateError,
                       match="HVD_ELASTIC_STATE_DIR is set but HVD_ELASTIC_KEY is not"):
        snap.write_snapshot(str(tmp_path), 1, 1, b"p")


def test_the_completion_file_is_never_written_through_a_planted_link(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "complete.0"
    link.symlink_to(victim)
    monkeypatch.setenv("HVD_ELASTIC_COMPLETION_FILE", str(link))
    with pytest.raises(OSError) as info:
        common_elastic._report_completion()
    assert info.value.errno == errno.ELOOP
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("planted", ["wrong key", "format 1"])
def test_a_planted_snapshot_is_refused_on_every_rank_and_never_unpickled(shared_dir, monkeypatch,
                                                                        planted):
    # Rank 0's host holds the planted file with the newest commit id (2**62), whose payload
    # creates a marker file when unpickled; every other rank's host holds this job's commit 5.
    tag = planted.replace(" ", "-")
    mine = os.path.join(shared_dir, f"{tag}-host{hvd.rank()}")
    os.mkdir(mine, 0o700)
    marker = os.path.join(shared_dir, f"unpickled-{tag}-{hvd.rank()}")
    path = snap.snapshot_path(mine)
    if hvd.rank() == 0:
        payload = pickle.dumps({"epoch": Plant(marker)})
        data = (snapshot_bytes(2**62, hvd.size(), payload, os.urandom(32)) if planted == "wrong key"
                else format1_bytes(2**62, hvd.size(), payload))
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
    else:
        snap.write_snapshot(mine, 5, hvd.size(), pickle.dumps({"epoch": 5}))
    monkeypatch.setenv("HVD_ELASTIC_STATE_DIR", mine)
    state = hvd.elastic.ObjectState(epoch=0)
    with pytest.raises(hvd.elastic.ElasticStateError) as info:
        common_elastic._start_generation(state)  # what @hvd.elastic.run does first
    if hvd.rank() == 0:
        why = ("its HMAC-SHA256 does not verify" if planted == "wrong key"
               else "it is a format-1 snapshot")
        assert f"rank 0 (host " in str(info.value)
        assert f"refusing the snapshot '{path}': {why}" in str(info.value)
    else:
        assert "rank(s) 0 refused their host's elastic state" in str(info.value)
    assert (state.epoch, state.commit_id) == (0, 0)  # nothing resumed, not even commit 5
    hvd.barrier()
    assert not [n for n in os.listdir(shared_dir) if n.startswith("unpickled-")]
