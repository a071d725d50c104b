"""hvd.elastic.ElasticSampler: partitions a dataset over the ranks and, after a reset, the
samples not yet processed this epoch over the ranks there are then."""
import math
import random

import torch.utils.data

from cadre.torch.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler, but it counts the samples processed (``record_batch``) so that
    a TorchState holding it carries on from there on a new number of ranks.

    Call ``record_batch(batch_idx, batch_size)`` after each batch and ``set_epoch(epoch)`` at
    the end of each epoch (not the start: an epoch cut short must not start over). ``seed`` must
    be the same on every rank."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of every rank as processed."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-partitions what is left of the epoch over the current ranks."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            # The same order on every rank and after every reset of this epoch.
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        # Pad with the first ones so that every rank gets the same number of samples.
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
