# SPDX-License-Identifier: Apache-2.0
"""ElasticSampler (horovod.torch.elastic.sampler, 0.28): a distributed sampler that remembers
which samples the current epoch has processed, so that a job resumed with another world size
goes on with the remaining samples only, re-partitioned over the ranks it has now.

One difference from Horovod: ``record_batch(i, n)`` records batch ``i`` of *every* rank (the
partition is deterministic), so any one rank's committed snapshot knows the whole world's
progress; hvd restores a generation from a single rank's snapshot.
"""
import math

import torch
import torch.utils.data

from hvd.common import basics


class ElasticSampler(torch.utils.data.Sampler):
    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self._world_indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: nothing processed yet, a new shuffle (seed + epoch)."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks batch `batch_idx` (of `batch_size` samples per rank) of every rank processed."""
        start, end = batch_idx * batch_size, (batch_idx + 1) * batch_size
        for r in range(self.num_replicas):
            self.processed_indices.update(self._world_indices[r::self.num_replicas][start:end])

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's sample indices of batch `batch_idx`."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def reset(self):
        """Re-partitions this epoch's unprocessed samples over the current ranks (padded with
        repeats so that every rank gets the same number)."""
        self.num_replicas = basics.size() if basics.is_initialized() else 1
        self.rank = basics.rank() if basics.is_initialized() else 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(order), generator=g).tolist()
        self.remaining_indices = [i for i in order if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        padded = list(self.remaining_indices)
        while len(padded) < self.total_size:
            padded += self.remaining_indices[:self.total_size - len(padded)]
        self._world_indices = padded
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
