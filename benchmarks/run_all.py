"""Run the benchmark scripts and collect their tables in one markdown file.

Usage: ``python benchmarks/run_all.py [--out FILE] [--timeout SECONDS] [--only SCRIPT ...]
[--keep SCRIPT ...] [--jobs N]`` (``make bench``, ``make bench ONLY=pte``)

Each script in ``SECTIONS`` runs as its own subprocess (``sys.executable SCRIPT --out TMP``, from
the repository root), so a crash or a hang in one cannot take the others down; ``--jobs 2``
runs two at a time. The report has the machine (CPUs, torch and ExecuTorch versions, commit,
date) and one section per script: a line saying the command, the commit and the date it ran
at and its wall time, then its markdown tables, or, when it failed, the exit status and the
last lines of its stderr. ``--only bench_pte.py`` (or ``pte``) runs that script alone and
``--keep bench_dsa.py`` every script but that one; the scripts run the longest first (by the
wall time the report at ``--out`` gives each section), those of ``ALONE`` last, with nothing
beside them; a section not run is copied whole from the
report already at ``--out``, its own line still naming the commit and date it was measured
at (no section says more than when it ran).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import importlib.metadata
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# (section heading, script in this directory), in report order
SECTIONS = (
    ("Memory plan: the bound lowered, vs ExecuTorch's best configuration", "bench_plan.py"),
    ("Run: latency, out-variant coverage and memory vs eager (and ExecuTorch)", "bench_run.py"),
    ("Planner on the DSA instances", "bench_dsa.py"),
    ("Shipped: the .pte with tensorplan's plan, run in ExecuTorch's runtime", "bench_pte.py"),
    ("Product kernels: ExecuTorch's matrix products, measured in its runtime",
     "bench_products.py"),
    ("CNNs patch by patch: the high-resolution peak", "bench_patches.py"),
    ("Int8 on a Cortex-M: ExecuTorch's Cortex-M programs, patch by patch", "bench_int8.py"),
    ("Transformers chunk by chunk: the token-row peak", "bench_chunks.py"),
    ("LLM exports chunked: prefill and decode, in both runtimes", "bench_decode.py"),
    ("Memory banks: the bank choice vs ExecuTorch's banked_greedy", "bench_banks.py"),
    ("Dynamic dims: the symbolic plan at the sizes a run has", "bench_symbolic.py"),
    ("Real size: a 30-layer 135M model's static-cache decode step", "bench_real_size.py"),
)
# Scripts whose figures depend on wall time (the planners' search budgets): run after the others,
# with nothing beside them, whatever ``--jobs`` says.
ALONE = ("bench_dsa.py",)
STDERR_LINES = 20         # lines of a failed script's stderr shown in its section
DEFAULT_TIMEOUT = 3600    # seconds one script may run before it counts as failed


@dataclass(frozen=True)
class Outcome:
    """What one script produced."""

    script: str          # file name in benchmarks/
    ok: bool             # exited 0 (and did not time out)
    text: str            # its tables when ok, else why it failed and its stderr tail
    seconds: float       # wall time
    kept: bool = False   # copied whole from the report at --out, not re-run
    ran: str = ""        # "commit C, date D": where and when it ran (empty when kept)


def _version(package: str) -> str:
    """The installed version of ``package``, or ``not installed``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo``, or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    """The short hash of the checked-out commit (``+dirty`` with local changes), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty.strip() else "")


def machine() -> str:
    """A markdown list describing the machine and the software the numbers come from."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    items = [f"date: {now}",
             f"CPU: {_cpu_model()}, {os.cpu_count()} logical CPUs",
             f"Python {platform.python_version()}, torch {_version('torch')}, "
             f"transformers {_version('transformers')}, executorch {_version('executorch')}",
             f"commit: {_commit()}"]
    return "".join(f"- {item}\n" for item in items)


def _failure(reason: str, stderr: str) -> str:
    """A failed section: the reason, then the last lines of stderr (if any) in a code block."""
    tail = "\n".join(stderr.rstrip().splitlines()[-STDERR_LINES:])
    if not tail:
        return f"**Failed:** {reason}.\n"
    return f"**Failed:** {reason}. Last lines of its stderr:\n\n```\n{tail}\n```\n"


def _run(command: list[str], timeout: float) -> tuple[int | None, str]:
    """Run ``command`` from the repository root in its own process group.

    Returns ``(exit status, stderr)``; the status is None when it timed out, in which case the
    whole group (the script and any subprocess it started) has been killed.
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
            return None, stderr
    return process.returncode, stderr


def run_script(script: str, timeout: float) -> Outcome:
    """Run ``benchmarks/<script> --out TMP`` and return its tables or why it failed.

    A script that exits 0 without writing ``--out`` counts as failed.
    """
    path = os.path.join(HERE, script)
    if not os.path.exists(path):
        return Outcome(script, False, _failure(f"`benchmarks/{script}` does not exist", ""), 0.0)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="run_all_") as workdir:
        out = os.path.join(workdir, "tables.md")
        status, stderr = _run([sys.executable, path, "--out", out], timeout)
        text = _read(out)
    seconds = time.perf_counter() - start
    if status is None:
        return Outcome(script, False, _failure(f"timed out after {timeout:.0f} s", stderr),
                       seconds)
    if status != 0:
        return Outcome(script, False, _failure(f"exit status {status}", stderr), seconds)
    if not text.strip():
        return Outcome(script, False, _failure("it exited 0 but wrote nothing to `--out`",
                                               stderr), seconds)
    return Outcome(script, True, text, seconds)


def _read(path: str) -> str:
    """The file's text, or an empty string when it was not written."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def sections(text: str) -> dict[str, str]:
    """Heading -> the whole body of each ``## `` section of a report (``RESULTS.md``)."""
    sections = {}
    for chunk in f"\n{text}".split("\n## ")[1:]:
        heading, _, body = chunk.partition("\n")
        sections[heading.strip()] = body.strip() + "\n"
    return sections


def kept_outcome(script: str, previous: str) -> Outcome:
    """The section of ``script`` copied whole from the report text ``previous``, not re-run
    (its own first line says when it was measured).

    It counts as failed when that report has no such section.
    """
    heading = next(title for title, name in SECTIONS if name == script)
    found = sections(previous).get(heading)
    if found is None:
        return Outcome(script, False, _failure(f"{script} not run: the previous report has no "
                                               f"section {heading!r}", ""), 0.0)
    return Outcome(script, True, found, 0.0, kept=True)


def last_seconds(previous: str) -> dict[str, float]:
    """Script -> the wall seconds its section in the report text ``previous`` took (its first
    line's ``..., 956 s.``), for the sections that say it.

    >>> last_seconds("## Planner on the DSA instances\\n\\n`python benchmarks/bench_dsa.py` "
    ...              "at commit abc, 2026-12-07 18:02 UTC, 167 s.\\n")
    {'bench_dsa.py': 167.0}
    """
    found = {}
    for heading, body in sections(previous).items():
        script = next((name for title, name in SECTIONS if title == heading), None)
        timed = re.match(r"`python benchmarks/[\w.]+` at [^\n]*?, (\d+) s\.", body)
        if script is not None and timed:
            found[script] = float(timed.group(1))
    return found


def script_name(name: str) -> str:
    """A section's script from its file name or short name (``pte`` -> ``bench_pte.py``).

    >>> script_name("pte"), script_name("bench_dsa.py")
    ('bench_pte.py', 'bench_dsa.py')
    """
    scripts = [script for _, script in SECTIONS]
    for candidate in (name, f"bench_{name}.py", f"{name}.py"):
        if candidate in scripts:
            return candidate
    raise SystemExit(f"run_all: no benchmark {name!r}; one of {', '.join(scripts)}")


def report(outcomes: Sequence[Outcome], jobs: int, seconds: float, started: str) -> str:
    """The whole markdown report: title, the machine as it was when the run ``started``
    (``machine()`` then: its commit is the one the sections ran at), this run's wall time
    (``seconds``, at ``jobs`` scripts at a time), then one section per script."""
    ran = [outcome.script.removeprefix("bench_").removesuffix(".py") for outcome in outcomes
           if not outcome.kept]
    parts = ["# Benchmark results\n\n", "Written by `benchmarks/run_all.py` (`make bench`).\n\n",
             "## Machine\n\n", "Each section's first line says the command, the commit and the "
             "date it ran at; this run's:\n\n", started,
             f"- this run: {len(ran)} of {len(outcomes)} sections ({', '.join(ran)}), "
             f"{jobs} at a time, {seconds / 60:.0f} min wall\n"]
    for (heading, _), outcome in zip(SECTIONS, outcomes, strict=True):
        if outcome.kept:
            parts.append(f"\n## {heading}\n\n{outcome.text.rstrip()}\n")
            continue
        timing = (f"`python benchmarks/{outcome.script}` at {outcome.ran}, "
                  f"{outcome.seconds:.0f} s")
        parts.append(f"\n## {heading}\n\n{timing}.\n\n{outcome.text.rstrip()}\n")
    return "".join(parts)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"),
                        help="markdown file to write (default: benchmarks/RESULTS.md)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per script (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--keep", action="append", default=[], type=script_name,
                        help="do not run this script; copy its section from the report "
                             "already at --out (repeatable)")
    parser.add_argument("--only", action="append", default=[], type=script_name,
                        help="run this script alone (repeatable; short names: pte, chunks); "
                             "copy every other section from the report already at --out")
    parser.add_argument("--jobs", type=int, default=1,
                        help="scripts run at a time (default 1: the timings are the "
                             "machine's alone)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen scripts, write the report; 0 when all succeeded, 1 otherwise."""
    options = _arguments(argv)
    scripts = [script for _, script in SECTIONS]
    run = [s for s in scripts if (s in options.only if options.only else s not in options.keep)]
    report_before = _read(options.out)
    previous = report_before if len(run) < len(scripts) else ""
    started = machine()
    ran = f"commit {_commit()}, {started.splitlines()[0].removeprefix('- date: ')}"

    def one(script: str) -> Outcome:
        print(f"run_all: {script} ...", file=sys.stderr, flush=True)
        outcome = dataclasses.replace(run_script(script, options.timeout), ran=ran)
        status = "ok" if outcome.ok else "FAILED"
        print(f"run_all: {script} {status} in {outcome.seconds:.0f} s", file=sys.stderr,
              flush=True)
        return outcome

    start = time.perf_counter()
    took = last_seconds(report_before)  # the longest first, so that two at a time end together
    shared = sorted((script for script in run if script not in ALONE),
                    key=lambda script: -took.get(script, math.inf))
    with concurrent.futures.ThreadPoolExecutor(max(options.jobs, 1)) as pool:
        done = dict(zip(shared, pool.map(one, shared), strict=True))
    done.update((script, one(script)) for script in run if script in ALONE)
    outcomes = [done[s] if s in done else kept_outcome(s, previous) for s in scripts]
    # written before opening --out: truncating it would mark the commit dirty
    text = report(outcomes, options.jobs, time.perf_counter() - start, started)
    with open(options.out, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"run_all: wrote {options.out}", file=sys.stderr)
    return 0 if all(outcome.ok for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
