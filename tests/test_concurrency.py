"""Runs from several threads: each result equals eager, and different programs (or runners)
run in parallel rather than behind one lock."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

import tensorplan as tp

CL = torch.channels_last
THREADS, RUNS = 4, 25

# Two calls of this op meet at the barrier: if one waits for the other to finish first, the
# barrier times out and both raise ``BrokenBarrierError``.
MEETING = threading.Barrier(2, timeout=20)


@torch.library.custom_op("tensorplan_test::meet", mutates_args=())
def meet(x: torch.Tensor) -> torch.Tensor:
    MEETING.wait()
    return x * 2


@meet.register_fake
def _(x):
    return torch.empty_like(x)


class SmallCnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.relu(self.conv2(y) + y)
        return self.head(y.mean(dim=(2, 3))), y.clone()


class Meets(torch.nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return meet(x + self.scale) - 1


def small_cnn() -> SmallCnn:
    return SmallCnn().eval().to(memory_format=CL)


def cnn_input(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 8, 8, generator=generator).to(memory_format=CL)


def test_four_threads_running_one_program_each_get_their_own_results():
    model = small_cnn()
    prog = tp.compile(model, (cnn_input(0),))

    def hammer(thread: int) -> int:
        wrong = 0
        for run in range(RUNS):
            x = cnn_input(1 + thread * RUNS + run)
            logits, features = prog.run(x)
            expected_logits, expected_features = model(x)
            wrong += not (torch.allclose(logits, expected_logits, atol=1e-5)
                          and torch.allclose(features, expected_features, atol=1e-5)
                          and features.is_contiguous(memory_format=CL))
        return wrong

    with ThreadPoolExecutor(THREADS) as pool:
        wrong = sum(pool.map(hammer, range(THREADS)))
    assert wrong == 0
    assert prog.default_runner.stats.runs == THREADS * RUNS


def _meet_in_two_threads(first, second) -> list[torch.Tensor]:
    x = torch.arange(6.0)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(first, x), pool.submit(second, x)]
        return [f.result() for f in futures]


def test_two_programs_run_in_parallel_not_behind_one_lock():
    one, two = tp.compile(Meets(1.0), (torch.zeros(6),)), tp.compile(Meets(2.0), (torch.zeros(6),))
    a, b = _meet_in_two_threads(one.run, two.run)
    assert torch.equal(a, torch.arange(6.0) * 2 + 1)
    assert torch.equal(b, torch.arange(6.0) * 2 + 3)


def test_two_runners_of_one_program_run_in_parallel():
    prog = tp.compile(Meets(1.0), (torch.zeros(6),))
    a, b = _meet_in_two_threads(prog.runner().run, prog.runner().run)
    assert torch.equal(a, torch.arange(6.0) * 2 + 1) and torch.equal(b, a)


def test_one_runner_per_thread_hammered_equals_eager():
    model = small_cnn()
    prog = tp.compile(model, (cnn_input(0),))

    def hammer(thread: int) -> int:
        runner, wrong = prog.runner(), 0
        for run in range(RUNS):
            x = cnn_input(1000 + thread * RUNS + run)
            logits, _ = runner.run(x)
            wrong += not torch.allclose(logits, model(x)[0], atol=1e-5)
        return wrong

    with ThreadPoolExecutor(THREADS) as pool:
        assert sum(pool.map(hammer, range(THREADS))) == 0
