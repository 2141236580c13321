"""machine.py and the choices made from it: bf16 only where native, threads from free cores."""

import logging
import os
import platform
import subprocess
import sys

import pytest
import torch

from transformer_mt import machine
from transformer_mt.errors import TmtError
from transformer_mt.training.execution import resolve_precision

CPU = torch.device("cpu")


def _pretend(monkeypatch, capability: str, features: set[str]) -> None:
    monkeypatch.setattr(machine, "cpu_capability", lambda: capability)
    monkeypatch.setattr(machine, "cpu_has", lambda feature: feature in features)


@pytest.mark.parametrize(
    ("capability", "features", "native", "reason"),
    [
        ("AVX2", {"avx512_bf16", "amx_tile"}, False, "CPU capability AVX2 has no native bf16"),
        ("AVX512", set(), False, "without avx512_bf16 or AMX"),
        ("AVX512", {"avx512_bf16"}, True, "with avx512_bf16"),
        ("AVX512", {"amx_tile", "avx512_bf16"}, True, "with AMX tiles"),
        ("DEFAULT", set(), False, "DEFAULT has no native bf16"),
    ],
)
def test_native_bf16_follows_the_kernels_torch_runs(
    monkeypatch, capability, features, native, reason
):
    _pretend(monkeypatch, capability, features)
    choice = machine.native_bf16()
    assert choice.value is native
    assert reason in choice.reason


def test_auto_precision_is_fp32_without_native_bf16_and_says_why(monkeypatch, caplog):
    _pretend(monkeypatch, "AVX2", set())
    with caplog.at_level(logging.INFO):
        assert resolve_precision("auto", CPU) is None
    assert "precision fp32 (auto): CPU capability AVX2 has no native bf16" in caplog.text


def test_auto_precision_is_bf16_where_native(monkeypatch, caplog):
    _pretend(monkeypatch, "AVX512", {"amx_tile"})
    with caplog.at_level(logging.INFO):
        assert resolve_precision("auto", CPU) is torch.bfloat16
    assert "precision bf16 (auto)" in caplog.text


def test_explicit_bf16_on_emulating_cpu_runs_with_a_warning(monkeypatch, caplog):
    _pretend(monkeypatch, "AVX2", set())
    with caplog.at_level(logging.WARNING):
        assert resolve_precision("bf16", CPU) is torch.bfloat16
    assert "several times slower" in caplog.text
    caplog.clear()
    _pretend(monkeypatch, "AVX512", {"avx512_bf16"})
    with caplog.at_level(logging.WARNING):
        resolve_precision("bf16", CPU)
    assert caplog.text == ""


def test_fp16_on_cpu_is_refused():
    with pytest.raises(TmtError, match="fp16 needs a CUDA device"):
        resolve_precision("fp16", CPU)


def test_threads_as_configured_then_from_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert machine.choose_threads(2).value == 2
    assert machine.choose_threads(0).value == 3


def test_auto_threads_leave_out_busy_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(machine, "busy_cores", lambda cores, seconds: [1])
    choice = machine.choose_threads(0)
    assert choice.value == 3
    assert "core(s) 1 of 4 busy" in choice.reason
    monkeypatch.setattr(machine, "busy_cores", lambda cores, seconds: [0, 1, 2, 3])
    assert machine.choose_threads(0).value == 1  # never fewer than one
    monkeypatch.setattr(machine, "busy_cores", lambda cores, seconds: [])
    assert machine.choose_threads(0).value == 4


def test_busy_cores_reads_the_kernel_counters(monkeypatch):
    # cpu0 idle for the whole sample, cpu1 busy 90% of it.
    samples = iter([{0: (100, 200), 1: (100, 200)}, {0: (200, 300), 1: (110, 300)}])
    monkeypatch.setattr(machine, "_cpu_times", lambda: next(samples))
    assert machine.busy_cores([0, 1], 0.0) == [1]


def test_busy_cores_sees_a_busy_loop():
    """A real busy process on an allowed core is seen (Linux only)."""
    if not os.path.exists("/proc/stat") or not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs /proc/stat and CPU affinity")
    import subprocess
    import sys

    core = sorted(os.sched_getaffinity(0))[-1]
    code = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    loop = subprocess.Popen([sys.executable, "-c", code])
    try:
        assert core in machine.busy_cores([core], 0.5)
    finally:
        loop.kill()
        loop.wait()


def test_governor_follows_other_processes_load(monkeypatch):
    """Other processes' share = machine busy time - our own CPU time, in cores."""
    tick = os.sysconf("SC_CLK_TCK")
    clock = {"now": 0.0, "own": 0.0, "busy": [0, 0]}

    def cpu_times():  # {cpu: (idle ticks, total ticks)}, total advancing at 1 tick per tick
        total = int(clock["now"] * tick)
        return {c: (total - clock["busy"][c], total) for c in (0, 1)}

    monkeypatch.setattr(machine, "_cpu_times", cpu_times)
    monkeypatch.setattr(machine.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(machine.time, "process_time", lambda: clock["own"])
    set_threads = []
    monkeypatch.setattr(machine.torch, "set_num_threads", set_threads.append)

    def run(seconds: float, own_cores: float, other_cores: float) -> None:
        clock["now"] += seconds
        clock["own"] += own_cores * seconds
        for c, share in enumerate((own_cores + other_cores) / 2 for _ in range(2)):
            clock["busy"][c] += int(share * seconds * tick)

    governor = machine.ThreadGovernor([0, 1], threads=2)
    run(2.0, own_cores=2.0, other_cores=0.0)
    assert governor.update() is None  # shorter than MIN_SECONDS: not measured yet
    run(10.0, own_cores=2.0, other_cores=0.0)
    assert governor.update() is None  # alone on the machine: two threads stay
    run(10.0, own_cores=1.33, other_cores=0.67)  # a busy process arrived
    change = governor.update()
    assert change.value == 1 and "other processes use 0.7 of 2 cores" in change.reason
    run(10.0, own_cores=1.0, other_cores=1.0)
    assert governor.update() is None  # still busy: one thread stays
    run(10.0, own_cores=1.0, other_cores=0.0)  # it left
    assert governor.update().value == 2
    assert set_threads == [1, 2]


def test_other_work_is_the_busy_time_of_its_cores_less_this_processs(monkeypatch):
    tick = os.sysconf("SC_CLK_TCK")
    # {cpu: (idle ticks, total ticks)}: in 2 s, cpu0 busy 5 s (of two threads, say), cpu1 9 s
    samples = iter([{0: (0, 0), 1: (0, 0)}, {0: (tick, 6 * tick), 1: (0, 9 * tick)}])
    monkeypatch.setattr(machine, "_cpu_times", lambda: next(samples))
    clock = {"own": 0.0, "now": 10.0}
    monkeypatch.setattr(machine.time, "process_time", lambda: clock["own"])
    monkeypatch.setattr(machine.time, "monotonic", lambda: clock["now"])
    work = machine.OtherWork([0])
    clock.update(own=4.0, now=12.0)
    assert work.seconds() == 2.0
    assert work.read() == 0.5  # cpu0's 5 s less this process's 4 s, over 2 s; cpu1 not ours


def test_set_threads_follows_the_load_only_when_chosen_automatically(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(machine, "busy_cores", lambda cores, seconds: [])
    counts = []
    monkeypatch.setattr(machine.torch, "set_num_threads", counts.append)
    for env, follows in (("", True), ("abc", True), ("\u00b2", True), ("3", False)):
        monkeypatch.setenv("OMP_NUM_THREADS", env)  # OpenMP ignores what is not a count
        threads, governor = machine.set_threads(0)
        assert (governor is not None) is follows, env
    assert machine.set_threads(2)[1] is None  # fixed by the config
    assert counts == [2, 2, 2, 3, 2]


def test_resolve_device_refuses_cuda_without_a_device(monkeypatch):
    monkeypatch.setattr(machine.torch.cuda, "is_available", lambda: False)
    assert machine.resolve_device("auto").type == "cpu"
    with pytest.raises(machine.SettingError, match="device=cuda: no CUDA device is available"):
        machine.resolve_device("cuda")


def test_freed_memory_is_kept_where_the_c_library_is_glibc():
    from transformer_mt.machine import keep_freed_memory

    assert keep_freed_memory() is (platform.libc_ver()[0] == "glibc")


def test_bound_primitive_cache_sets_ondnns_variable_unless_the_user_did(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    machine.bound_primitive_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(machine.TRAINING_PRIMITIVES)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "300")
    machine.bound_primitive_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "300"


# Memory held after bfloat16 products (forward and backward) of one layer over 240 shapes, in a
# fresh process, in MiB: resident memory after glibc's malloc_trim hands back the freed pages it
# keeps, whose amount varies from run to run (549 to 2,159 MiB for the default untrimmed, 431
# and 431 trimmed; docs/results.md, 2026-12-05).
_SHAPES_SCRIPT = """
import ctypes, sys, torch
from transformer_mt.machine import bound_primitive_cache
if sys.argv[1] == "bounded":
    bound_primitive_cache()
torch.set_num_threads(1)
layer = torch.nn.Linear(256, 8000)
def update(rows):
    x = torch.randn(rows, 256, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x).float().sum().backward()
def resident():
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    status = open("/proc/self/status").read()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024
update(998)
before = resident()
for rows in range(1000, 1480, 2):
    update(rows)
print(resident() - before)
"""


@pytest.mark.slow
@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="reads what glibc's malloc_trim leaves"
)
@pytest.mark.skipif(
    not machine.native_bf16().value,
    reason="bfloat16 is emulated on this CPU: one of its two runs took over 9 minutes (AVX2 EPYC)",
)
def test_a_bounded_primitive_cache_bounds_the_memory_of_new_bf16_shapes():
    """What `bound_primitive_cache` is for, where oneDNN keeps memory per bfloat16 shape."""
    grown = {}
    for mode in ("default", "bounded"):
        env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
        done = subprocess.run(
            [sys.executable, "-c", _SHAPES_SCRIPT, mode],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        grown[mode] = float(done.stdout)
    if grown["default"] < 300:
        pytest.skip(f"oneDNN kept {grown['default']:.0f} MiB for 240 bf16 shapes here")
    assert grown["bounded"] < 0.6 * grown["default"], grown  # measured: 200 against 431
