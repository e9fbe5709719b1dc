"""Freeze/restore speed of the snapstate engine, as ratios to plain pickle.

    python benchmarks/bench_freeze.py [--json FILE]

Three workloads (benchmarks/bench_agent.py) each run as a snapstate job up to their
one snapshot():

    (a) chat       a 200-message (~100 KB) chat history held in a 6-frame stack
    (b) bulk       ~10 MB of state (10,000 documents of ~1 KB text)
    (c) recursion  a 150-frame recursion with a small dict local in every frame

While the job is paused inside snapshot(), the hub's Job._freeze is timed
repeatedly on the live stack, and so are its parts:

    capture + serialize   module scan + capture + pickle: the issue's measure
    module scan  _agent.agent_modules(): finding the agent's modules in sys.modules
    capture      capture_stack() + collecting the agent's module globals
    pickle       the engine's pickler (snapstate.serializers._pickler.dumps)
    freeze       Job._freeze as a whole: the above plus the header
    zstd, write+fsync, roots (naming an unpicklable object; only on failure) are
                 timed apart and left out of the ratios: the durable file and its
                 floor are benchmarks/bench_durable.py's

After the job finishes, its snapshot file is restored in the same process:

    restore   Job.restore as a whole: version and code checks (checks), unpickling
              (unpickle, the engine's _pickler.loads), restoring globals, building
              the resume functions (morph); reading the file before it (verify,
              decrypt, decompress) is shown apart

then the restored job is run to the end and must return the same state digest as
the uninterrupted run.

Every figure is the median of several repetitions (after warm-up), each timed with
the cyclic GC paused, like timeit. Ratios are to pickle.dumps (freeze side) and
pickle.loads (restore side). Targets from the issue: capture + serialize <= 4x
pickle.dumps for (a) and <= 1.5x for (b); restore <= 5x pickle.loads for (a). Speed is measured and
printed, never asserted. Takes about 10 s per Python version.
"""

# Only modules, functions and classes at module level: this script, run as __main__
# from the agent's directory, counts as one of the agent's own modules, and any other
# global of it would be frozen with the job (and with the plain-pickle baseline).
import argparse
import gc
import json
import os
import pickle
import platform
import statistics
import sys
import tempfile
import time

from snapstate.runtime import _agent, _capture, _defstate, _job, _morph
from snapstate.serializers import _fs, _pickler, _snapfile
from snapstate.serializers._home import Home


def scenarios():
    """(key, title, entry function, freeze repetitions, restore repetitions, target ratios)"""
    return [
        (
            "a",
            "(a) chat: 200 messages (~100 KB) in a 6-frame stack",
            "chat_main",
            200,
            200,
            {"freeze": 4.0, "restore": 5.0},
        ),
        ("b", "(b) bulk: ~10 MB state", "bulk_main", 15, 15, {"freeze": 1.5}),
        ("c", "(c) recursion: 150 frames", "recursion_main", 100, 100, {}),
    ]


def timed_ms(fn) -> float:
    """Wall time of one call of fn(), in ms, with the cyclic GC paused. The result
    is freed after the clock stops (for plain pickle and the engine alike)."""
    result = None
    gc.disable()
    try:
        start = time.perf_counter_ns()
        result = fn()
        return (time.perf_counter_ns() - start) / 1e6
    finally:
        del result
        gc.enable()


def measure(parts: dict, reps: int, warmup: int = 3) -> dict:
    """Median ms of every fn in parts, calling them in turn (interleaved) each rep."""
    samples = {name: [] for name in parts}
    for i in range(warmup + reps):
        for name, fn in parts.items():
            ms = timed_ms(fn)
            if i >= warmup:
                samples[name].append(ms)
    return {name: statistics.median(values) for name, values in samples.items()}


def plain_state(top, entry) -> dict:
    """The agent's locals, frame by frame from snapshot()'s caller out, and its
    module globals: the data the engine must save, as plain Python objects."""
    frames = []
    frame = top.f_back
    while frame.f_code is not _job._bootstrap.__code__:
        frames.append(dict(frame.f_locals))
        frame = frame.f_back
    return {"locals": frames, "globals": _agent.capture_globals(_agent.agent_modules(entry))}


class TimedJob(_job.Job):
    """A Job whose freeze, while the agent is paused in snapshot(), is timed."""

    def __init__(self, home, job_id, entry, reps):
        super().__init__(home, job_id, entry, [])
        self.reps = reps
        self.freeze_ms: dict = {}
        self.plain_bytes = b""
        self.info: dict = {}

    def _freeze(self, request, seq):
        top = self._agent.gr_frame
        plain = plain_state(top, self.entry)
        plain_bytes = self.plain_bytes = pickle.dumps(plain, protocol=5)
        stop = _job._bootstrap.__code__
        modules = _agent.agent_modules(self.entry)

        def capture():  # mirrors the first half of Job._freeze
            frames = _capture.capture_stack(top, stop, request.handled)
            return {
                "frames": frames,
                "globals": _agent.capture_globals(modules),
                "defs": _defstate.capture(modules),
                "handled": request.handled,
                "label": request.label,
            }

        state = capture()
        body = _pickler.dumps(state)
        self.freeze_ms = measure(
            {
                "freeze": lambda: _job.Job._freeze(self, request, seq),
                "modules": lambda: _agent.agent_modules(self.entry),
                "capture": capture,
                "roots": lambda: self._roots(state),
                "pickle": lambda: _pickler.dumps(state),
                "zstd": lambda: b"".join(_snapfile._compressed(body)),
                "pickle.dumps": lambda: pickle.dumps(plain, protocol=5),
            },
            self.reps,
        )
        header, payload = _job.Job._freeze(self, request, seq)
        data = b"".join(_snapfile._compressed(payload))
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "probe.snap")
            self.freeze_ms["write+fsync"] = measure(
                {"w": lambda: _fs.write_atomic(target, [data])}, 5, warmup=1
            )["w"]
        self.info = {
            "frames": len(state["frames"]),
            "sys_modules": len(sys.modules),
            "agent_modules": sorted(state["globals"]),
            "plain_pickle_bytes": len(plain_bytes),
            "engine_pickle_bytes": len(body),
            "file_bytes": len(data),
        }
        return header, payload


def run_scenario(agent_path, function, freeze_reps, restore_reps, directory) -> dict:
    entry = _agent.EntryPoint("bench_agent", function, agent_path)
    home = Home(directory)
    home.catalog.create_job(function, entry.as_dict(), [])
    job = TimedJob(home, function, entry, freeze_reps)
    first = job.run()
    row = home.catalog.latest(function)
    assert row is not None and not first["resumed"], "the agent took no snapshot"
    # How messages name it (an older release, run for an A/B, has only file rows).
    path = home.where(row) if hasattr(home, "where") else home.row_path(row)

    restored = _job.Job.open(home, function)
    header, raw = home.read_row(row)
    body = raw
    state = _pickler.loads(raw)
    plain_bytes = job.plain_bytes  # the same state, pickled plainly while it was live

    def checks():
        _job.check_versions(header, path)
        restored._check_code(header, path)

    restore_ms = measure(
        {
            "restore": lambda: restored.restore(header, body, path),
            "checks": checks,
            "unzstd": lambda: home.read_row(row),
            "unpickle": lambda: _pickler.loads(raw),
            "morph": lambda: _morph.build_resume_chain(state["frames"], restored._resume_info),
            "pickle.loads": lambda: pickle.loads(plain_bytes),
        },
        restore_reps,
    )

    again = restored._loop(restored.restore(header, body, path), (), {})
    home.close()
    if again["digest"] != first["digest"] or not again["resumed"]:
        raise SystemExit(f"{function}: the restored run ended differently: {again} != {first}")
    return {"freeze_ms": job.freeze_ms, "restore_ms": restore_ms, **job.info}


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?"
            )
    except OSError:
        pass
    import cloudpickle
    import greenlet
    import zstandard

    return {
        "python": sys.version.split()[0],
        "nproc": os.cpu_count(),
        "cpu": model,
        "platform": platform.platform(),
        "greenlet": greenlet.__version__,
        "cloudpickle": cloudpickle.__version__,
        "zstandard": zstandard.__version__,
    }


def report(title, res, targets) -> None:
    f, r = res["freeze_ms"], res["restore_ms"]
    print(
        f"\n{title}: {res['frames']} frames captured, plain pickle "
        f"{res['plain_pickle_bytes'] / 1e3:,.1f} KB, engine pickle "
        f"{res['engine_pickle_bytes'] / 1e3:,.1f} KB, snapshot file {res['file_bytes'] / 1e3:,.1f} KB"
    )

    def line(name, ms, base, base_name, target=None):
        verdict = ""
        if target is not None:
            verdict = f"   target <= {target:g}x: {'MET' if ms / base <= target else 'MISSED'}"
        print(f"  {name:<36} {ms:9.3f} ms {ms / base:7.2f}x {base_name}{verdict}")

    dumps, loads = f["pickle.dumps"], r["pickle.loads"]
    other = f["freeze"] - sum(f[k] for k in ("modules", "capture", "pickle"))
    print(f"  {'pickle.dumps (baseline)':<36} {dumps:9.3f} ms")
    line(
        "capture + serialize",
        f["modules"] + f["capture"] + f["pickle"],
        dumps,
        "pickle.dumps",
        targets.get("freeze"),
    )
    line("  Job._freeze (+ header)", f["freeze"], dumps, "pickle.dumps")
    print(
        f"    module scan {f['modules']:.3f} ({res['sys_modules']} in sys.modules) | capture "
        f"{f['capture']:.3f} | pickle {f['pickle']:.3f} | other {other:.3f} ms. Not in the "
        f"ratio (the file, see bench_durable.py): zstd {f['zstd']:.3f} | write+fsync "
        f"{f['write+fsync']:.3f} ms; path finder for errors {f['roots']:.3f} ms (only when "
        "pickling fails)"
    )
    print(f"  {'pickle.loads (baseline)':<36} {loads:9.3f} ms")
    line("restore (Job.restore)", r["restore"], loads, "pickle.loads", targets.get("restore"))
    line("  unpickle only", r["unpickle"], loads, "pickle.loads")
    other = r["restore"] - sum(r[k] for k in ("checks", "unpickle", "morph"))
    print(
        f"    checks {r['checks']:.3f} | unpickle {r['unpickle']:.3f} | morph {r['morph']:.3f} | "
        f"other {other:.3f} ms. Before it, reading the file (verify, decrypt, unzstd): "
        f"{r['unzstd']:.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()

    agent_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_agent.py")
    facts = machine()
    print(
        f"Python {facts['python']} | {facts['nproc']} CPUs, {facts['cpu']} | greenlet "
        f"{facts['greenlet']}, cloudpickle {facts['cloudpickle']}, zstandard {facts['zstandard']}"
    )
    results = {"machine": facts, "scenarios": {}}
    argv = list(sys.argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="snapstate-bench-") as tmp:
        for key, title, function, freeze_reps, restore_reps, targets in scenarios():
            res = run_scenario(
                agent_path, function, freeze_reps, restore_reps, os.path.join(tmp, key)
            )
            sys.argv = argv  # Job.run / Job.restore set sys.argv for the agent
            report(title, res, targets)
            results["scenarios"][key] = {"title": title, "targets": targets, **res}
    print(f"\n({time.perf_counter() - started:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
