"""trim_heap gives the pages of freed small objects back to the OS (glibc), so the Evaluator's
driver does not carry the sample pass's garbage into its reward-model fit."""

import subprocess
import sys

import pytest

CHILD = """
import sys
from rlops.components.common.heap import trim_heap

def rss_mb():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) // 1024

records = [bytes(600) + i.to_bytes(4, "little") for i in range(400_000)]  # ~250 MB on malloc's heap
pin = bytes(600)  # allocated last: the heap's top stays in use, so free() alone cannot shrink it
held = rss_mb()
del records
freed = rss_mb()
trimmed = trim_heap()
print(held, freed, rss_mb(), trimmed)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim; elsewhere a no-op")
def test_freed_small_objects_go_back_to_the_os_after_a_trim():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    held, freed, trimmed, ok = proc.stdout.split()
    held, freed, trimmed = int(held), int(freed), int(trimmed)
    assert ok == "True"
    assert freed > held - 60, (held, freed)  # free() alone keeps the pages resident
    assert trimmed < freed - 180, (held, freed, trimmed)  # the trim returns them


def test_every_in_process_evaluator_pass_trims_the_heap_after_it(monkeypatch, tmp_path):
    """The Evaluator's Beam passes run in the driver's process (the DirectRunner): run_pipeline gives
    what they read and freed back before the driver fits anything."""
    import apache_beam as beam

    from rlops.components.evaluator import beam as engine

    trims: list[int] = []
    monkeypatch.setattr(engine, "trim_heap", lambda: trims.append(1) or True)
    value = engine.run_pipeline(lambda p: p | beam.Create([3, 4]) | beam.CombineGlobally(sum), None, str(tmp_path))
    assert value == 7 and trims == [1]
