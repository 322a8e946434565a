"""How the sampler hands a sample to its readers: batched wake-ups and timeouts in the wait."""

from __future__ import annotations

import asyncio

from jupyter_gpuburst.gpu import sampler as sampler_mod
from jupyter_gpuburst.gpu.sampler import Sample, Sampler
from jupyter_gpuburst.gpu.simulated import SimulatedBackend


async def test_publish_wakes_readers_a_batch_per_loop_turn():
    sampler = Sampler(backend=SimulatedBackend(1))
    loop = asyncio.get_running_loop()
    waiters = [loop.create_future() for _ in range(20)]
    sampler._waiters = set(waiters)
    sample = Sample(data={}, encoded=b"{}", seq=1)
    publishing = asyncio.ensure_future(sampler._publish(sample))
    await asyncio.sleep(0)  # one turn: the publisher ran up to its first yield
    assert sum(w.done() for w in waiters) == sampler_mod.FANOUT_BATCH
    await publishing
    assert all(w.result() is sample for w in waiters)
    assert sampler._waiters == set()
    await sampler.close()


async def test_next_sample_times_out_with_none_and_forgets_the_reader():
    sampler = Sampler(backend=SimulatedBackend(1), period_s=10.0, process_period_s=10.0)
    first = await sampler.current()
    assert await sampler.next_sample(first, timeout=0.05) is None
    assert sampler._waiters == set()
    await sampler.close()


async def test_readers_get_each_sample_once_in_order():
    sampler = Sampler(backend=SimulatedBackend(1), period_s=0.02, process_period_s=0.02)
    seen: list[int] = []
    async with sampler.subscribe():
        last = None
        while len(seen) < 3:
            last = await sampler.next_sample(last, timeout=1.0)
            assert last is not None
            seen.append(last.seq)
    assert seen == sorted(set(seen))
    await sampler.close()
