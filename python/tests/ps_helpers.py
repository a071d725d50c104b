"""The small model and batches the parameter-server tests train."""
import torch


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))


def batches(seed, n=6):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 5, generator=g), torch.randn(8, 2, generator=g)) for _ in range(n)]
