"""How many CPU threads torch computes with: chosen on purpose, said where a speed is printed.

torch starts with one thread per core. That is right for large matrix products on an idle
machine and badly wrong in two common cases, both measured by bench/bench_threads.py:

  * work too small to split (the tiny checkpoint, a single layer on 48 tokens): every operation
    then pays for waking and joining the threads, and that costs more than the work itself;
  * a machine whose cores are busy with other programs: a thread that has no core of its own
    holds up the others at every join (chapter 9 on the tiny checkpoint, 2 cores at load 3-4:
    prefill 58 tokens/s with 2 threads against 1426 with one; the full-size model at load 2-4:
    prefill 6.5 against 21.7 tokens/s, decode 0.59 against 2.49).

So `choose()` decides, in this order:
    QWEN_THREADS=N          the learner's choice for this course, always wins;
    OMP_NUM_THREADS=N       the usual knob of OpenMP programs, respected as well;
    small work              1 thread;
    otherwise               torch's default (the cores), less the cores other programs keep busy
                            (the 1-minute load average, less this process), at least 1.

`use()` applies a choice and returns it; main.py puts the previous setting back after each
chapter, so no chapter changes another's threads.
"""
import os
from dataclasses import dataclass

import torch

from qwen.lang import QwenError, tr

DEFAULT = torch.get_num_threads()        # torch's own choice at first import: the cores, or $OMP_NUM_THREADS


@dataclass(frozen=True)
class Choice:
    """A thread count and why it was chosen (both languages)."""
    threads: int
    why_en: str
    why_zh: str

    def text(self):
        """'1 thread: the work is too small to split across threads; ...', in the learner's language."""
        return tr("{n} thread{s}: {why}", "{n} 个线程：{why}", n=self.threads,
                  s="" if self.threads == 1 else "s", why=tr(self.why_en, self.why_zh))


def _count(name, value, strict):
    """A positive thread count from an environment variable, or None when it is not set.
    OMP_NUM_THREADS may be a list for nested levels ("4,2"): its first entry counts."""
    value = (value or "").strip()
    if not value:
        return None
    first = value.split(",")[0].strip()
    if first.isdigit() and 1 <= int(first) <= most_threads():
        return int(first)
    if first.isdigit() and int(first) >= 1:      # torch crashes on a count far past the cores (999999: a segfault)
        if strict:
            raise QwenError("{name}={value} is more threads than this machine can use: at most {m} "
                            "(4 per core), e.g. {name}={c}.",
                            "{name}={value} 超出了本机能用的线程数：最多 {m} 个（每个核心 4 个），例如 {name}={c}。",
                            name=name, value=first, m=most_threads(), c=cores())
        return most_threads()
    if strict:
        raise QwenError("{name}={value!r} is not a thread count: use a whole number of at least 1, e.g. {name}=1, "
                        "or unset it to let the course choose.",
                        "{name}={value!r} 不是线程数：请用至少为 1 的整数，例如 {name}=1；或者取消它，由课程来选。",
                        name=name, value=value)
    return None                                  # another program's syntax: torch reads it, we do not guess


def most_threads():
    """The largest count accepted: 4 threads per core (more only slows down, and torch crashes far past it)."""
    return 4 * cores()


def cores():
    """The cores this process may run on (its CPU affinity where the system says so)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cores(load=None):
    """Cores other programs keep busy: the 1-minute load average, less this process's own 1."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):        # Windows has no load average: assume an idle machine
            return 0.0
    return max(0.0, load - 1.0)


def choose(small, env=None, load=None, default=None, ncores=None):
    """The thread count for work of this size on this machine now (see the module's docstring).

    small: True for work too small to split (the tiny checkpoint, single small layers).
    env, load, default, ncores: the environment, load average, torch's default and core count
    (None: this process's own); given by tests."""
    env = os.environ if env is None else env
    n = _count("QWEN_THREADS", env.get("QWEN_THREADS"), strict=True)
    if n:
        return Choice(n, f"QWEN_THREADS={n}", f"QWEN_THREADS={n}")
    n = _count("OMP_NUM_THREADS", env.get("OMP_NUM_THREADS"), strict=False)
    if n:
        return Choice(n, f"OMP_NUM_THREADS={n}; QWEN_THREADS=N to change",
                      f"OMP_NUM_THREADS={n}；用 QWEN_THREADS=N 修改")
    if small:
        return Choice(1, "the work is too small to split across threads; QWEN_THREADS=N to change",
                      "计算量太小，分给多个线程反而更慢；用 QWEN_THREADS=N 修改")
    default = DEFAULT if default is None else default
    ncores = cores() if ncores is None else ncores
    busy = busy_cores(load)
    free = max(1, min(default, round(ncores - busy)))
    if free < min(default, ncores):
        return Choice(free, f"{free} of {ncores} cores: other programs keep about {busy:.1f} busy "
                            f"(load average); QWEN_THREADS=N to change",
                      f"{ncores} 个核心中用 {free} 个：其他程序大约占用 {busy:.1f} 个（平均负载）；用 QWEN_THREADS=N 修改")
    return Choice(free, "one per core of this machine; QWEN_THREADS=N to change",
                  "本机每个核心一个；用 QWEN_THREADS=N 修改")


def use(choice):
    """Compute with `choice.threads` threads from now on; returns the choice."""
    torch.set_num_threads(choice.threads)
    return choice


def note(choice):
    """Print, under a timing, how many threads it used and why: one line."""
    print(tr("  (timed with {c})", "  （计时使用 {c}）", c=choice.text()))
