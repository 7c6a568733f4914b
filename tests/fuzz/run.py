"""Run the fuzz harnesses (tests/fuzz/harnesses.py): `nox -s fuzz` and tests/integration/test_fuzz.py call this.

    python tests/fuzz/run.py [--seconds N] [--target NAME ...] [--out DIR]
    python tests/fuzz/run.py --replay [--target NAME ...]     # the committed corpus, once, deterministically
    python tests/fuzz/run.py --list

Each target is fuzzed for N seconds (default: $PIPELINE_FUZZ_SECONDS, else 60)
in its own process with atheris (coverage-guided libFuzzer), starting from
the committed seeds in tests/fuzz/corpus/<target>/.  New inputs go to
DIR/corpus/<target>/ (default DIR: .fuzz, ignored by git; a later run goes on
from them) and every crashing input to DIR/crashes/<target>/: replay one with
`python tests/fuzz/run.py --target NAME --input FILE`.  One `OK:`/`FAIL:`
line per target; exit 1 when any target crashed.

Where atheris has no wheel (PyPI has CPython 3.11-3.13 manylinux x86_64 wheels
only; building the sdist needs clang with libFuzzer), the same harnesses run
under a seeded mutation loop over the same corpus instead (byte flips,
inserts, deletes, splices and interesting values; no coverage guidance), and
the report says so.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # `fuzz` is the package tests/fuzz
from fuzz.sandbox import memory_folder  # noqa: E402

PER_INPUT_TIMEOUT = 20  # seconds: an input that takes longer is a hang (a bug)
RSS_LIMIT_MB = 2048  # a reader that needs more for one input is a memory bomb (a bug)


def have_atheris() -> bool:
    import importlib.util

    return importlib.util.find_spec("atheris") is not None


def _child(name: str, seconds: float, out: Path, runs: int | None) -> int:
    """One target in this process: atheris when it is installed, else the mutation loop."""
    work_corpus = out / "corpus" / name
    crashes = out / "crashes" / name
    work_corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    if have_atheris():
        import atheris

        assert "pipeline" not in sys.modules, "the pipeline was imported before atheris could instrument it"
        with atheris.instrument_imports(include=["pipeline", "tarfile", "gzip", "tomllib", "json", "oras", "spdx_tools", "fuzz"]):
            from fuzz import harnesses
        spec = harnesses.TARGETS[name]
        harnesses.sandbox()  # the audit hook before the first input

        def one(data: bytes) -> None:
            harnesses.run_input(name, data)

        argv = [
            sys.argv[0],
            f"-max_total_time={max(1, int(seconds))}",
            f"-timeout={PER_INPUT_TIMEOUT}",
            f"-rss_limit_mb={RSS_LIMIT_MB}",
            f"-max_len={spec.max_len}",
            f"-artifact_prefix={crashes}/",
            "-print_final_stats=1",
        ]
        if runs is not None:
            argv.append(f"-runs={runs}")
        if spec.tokens:
            words = out / "dicts" / f"{name}.dict"
            words.parent.mkdir(parents=True, exist_ok=True)
            words.write_text(harnesses.dictionary(name))
            argv.append(f"-dict={words}")
        argv += [str(work_corpus), str(harnesses.CORPUS / name)]
        if spec.structure:
            from fuzz.mutators import mutate_document

            def mutator(data: bytes, max_size: int, seed: int) -> bytes:
                rng = random.Random(seed)
                if rng.random() < 0.5:
                    return atheris.Mutate(data, max_size)
                mutated = mutate_document(data, rng, lambda part: atheris.Mutate(part, max_size), kind=spec.structure, sep=harnesses.SEP)
                return mutated[:max_size]

            atheris.Setup(argv, one, custom_mutator=mutator)
        else:
            atheris.Setup(argv, one)
        atheris.Fuzz()
        return 0  # not reached: atheris exits
    from fuzz import harnesses

    return mutation_loop(name, seconds, crashes, runs=runs)


# -- the fallback: a seeded mutation loop --------------------------------------------

_INTERESTING = [b"\x00", b"\xff", b"\x7f", b"\x80", b"-1", b"0", b"1e999", b"NaN", b"9" * 5000, b'"', b"\\", b"/", b"..", b"\r", b"\n", b"{", b"[", b"}", b"]", b"\xef\xbb\xbf", b"\\ud800"]


def mutate(data: bytes, rng: random.Random, pool: list[bytes], max_len: int) -> bytes:
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        choice = rng.randrange(6)
        position = rng.randint(0, len(buffer))
        if choice == 0 and buffer:
            buffer[min(position, len(buffer) - 1)] ^= 1 << rng.randrange(8)
        elif choice == 1:
            buffer[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif choice == 2 and buffer:
            del buffer[position : position + rng.randint(1, 64)]
        elif choice == 3:
            buffer[position:position] = rng.choice(_INTERESTING)
        elif choice == 4 and pool:
            other = rng.choice(pool)
            start = rng.randint(0, len(other))
            buffer[position:position] = other[start : start + rng.randint(1, 256)]
        elif choice == 5 and buffer:
            end = min(len(buffer), position + rng.randint(1, 32))
            buffer[position:end] = buffer[position:end] * rng.randint(2, 16)
    return bytes(buffer[:max_len])


def mutation_loop(name: str, seconds: float, crashes: Path, *, runs: int | None = None, seed: int = 0) -> int:
    from fuzz import harnesses

    spec = harnesses.TARGETS[name]
    pool = [path.read_bytes() for path in harnesses.corpus_files(name)] or [b""]
    rng = random.Random(f"{name}:{seed}")
    ends = time.monotonic() + seconds
    count = 0
    from fuzz.mutators import mutate_document

    while time.monotonic() < ends and (runs is None or count < runs):
        seed_input = rng.choice(pool)
        if spec.structure and rng.random() < 0.5:
            data = mutate_document(seed_input, rng, lambda part: mutate(part, rng, pool, spec.max_len), kind=spec.structure, sep=harnesses.SEP)[: spec.max_len]
        else:
            data = mutate(seed_input, rng, pool, spec.max_len)
        count += 1
        try:
            harnesses.run_input(name, data)
        except BaseException:  # noqa: BLE001 - every escape is a finding
            import hashlib

            path = crashes / f"crash-{hashlib.sha1(data).hexdigest()}"
            path.write_bytes(data)
            traceback.print_exc()
            print(f"FAIL: {name}: crash after {count} inputs, saved as {path}", file=sys.stderr)
            return 1
    print(f"mutation loop (no atheris): {count} inputs in {seconds:.0f} s", file=sys.stderr)
    return 0


# -- the parent -------------------------------------------------------------------------


def replay(names: list[str], inputs: list[Path]) -> int:
    from fuzz import harnesses

    failed = 0
    for name in names:
        files = inputs or harnesses.corpus_files(name)
        for path in files:
            try:
                harnesses.run_input(name, path.read_bytes())
            except BaseException:  # noqa: BLE001
                failed += 1
                traceback.print_exc()
                print(f"FAIL: {name}: {path}")
        if not inputs:
            print(f"{'OK' if not failed else 'FAIL'}: {name}: replayed {len(files)} corpus inputs")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--child" in argv:
        # Before anything imports the pipeline: atheris instruments modules as they are first imported.
        child = argparse.ArgumentParser()
        child.add_argument("--child")
        child.add_argument("--seconds", type=float)
        child.add_argument("--out", type=Path)
        child.add_argument("--runs", type=int, default=None)
        known = child.parse_args(argv)
        return _child(known.child, known.seconds, known.out, known.runs)
    from fuzz import harnesses

    parser = argparse.ArgumentParser(prog="tests/fuzz/run.py", description="Fuzz every reader of outside bytes (atheris; see tests/fuzz/harnesses.py).")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("PIPELINE_FUZZ_SECONDS", "60")), help="time per target (default $PIPELINE_FUZZ_SECONDS or 60)")
    parser.add_argument("--target", action="append", default=[], choices=sorted(harnesses.TARGETS), help="a target (repeatable; default all)")
    parser.add_argument("--out", type=Path, default=ROOT / ".fuzz", help="where new corpus inputs and crashes go (default .fuzz)")
    parser.add_argument("--runs", type=int, default=None, help="stop each target after this many inputs")
    parser.add_argument("--replay", action="store_true", help="run the committed corpus (or --input files) once, without fuzzing")
    parser.add_argument("--input", action="append", type=Path, default=[], help="with --replay: these files instead of the corpus")
    parser.add_argument("--list", action="store_true", help="list the targets")
    args = parser.parse_args(argv)
    names = args.target or sorted(harnesses.TARGETS)
    if args.list:
        for name in sorted(harnesses.TARGETS):
            print(f"{name:<18} {harnesses.TARGETS[name].doc}")
        return 0
    if args.replay or args.input:
        return replay(names, args.input)
    engine = "atheris (libFuzzer, coverage-guided)" if have_atheris() else "a seeded mutation loop (atheris is not installed for this platform)"
    print(f"fuzzing {len(names)} targets for {args.seconds:g} s each with {engine}; crashes go to {args.out / 'crashes'}", flush=True)
    failed = []
    for name in names:
        crashes = args.out / "crashes" / name
        before = set(crashes.glob("*")) if crashes.is_dir() else set()
        command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--seconds", str(args.seconds), "--out", str(args.out)]
        if args.runs is not None:
            command += ["--runs", str(args.runs)]
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"omp-ninfer-fuzz-{name}-", dir=memory_folder()) as scratch:
            env = dict(os.environ, PIPELINE_FUZZ_SCRATCH=scratch)
            result = subprocess.run(command, capture_output=True, text=True, errors="replace", cwd=ROOT, env=env)
        took = time.monotonic() - started
        new = sorted(set(crashes.glob("*")) - before) if crashes.is_dir() else []
        stats = [line for line in result.stderr.splitlines() if line.startswith(("stat::number_of_executed_units", "mutation loop"))]
        runs = stats[0].split(":")[-1].strip() if stats else "?"
        grew = [line.split(":")[-1].strip() for line in result.stderr.splitlines() if line.startswith("stat::new_units_added")]
        if result.returncode != 0 or new:
            failed.append(name)
            tail = "\n".join(result.stderr.splitlines()[-40:])
            print(f"FAIL: {name}: exit {result.returncode} after {took:.0f} s; crashing inputs: {', '.join(str(p) for p in new) or 'none saved'}\n{tail}", flush=True)
        else:
            coverage = f", {grew[0]} new coverage inputs" if grew else ""
            print(f"OK: {name}: {runs} inputs in {took:.0f} s{coverage}, no crash", flush=True)
    if failed:
        print(f"FUZZ FAILED: {len(failed)} of {len(names)} targets crashed ({', '.join(failed)}); replay with --replay --target NAME --input FILE")
        return 1
    print(f"FUZZ PASSED: {len(names)} targets, no crash")
    return 0


if __name__ == "__main__":
    sys.exit(main())
