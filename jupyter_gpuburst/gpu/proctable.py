"""A cached view of /proc's parent links, so finding every kernel's process tree is cheap.

``psutil.Process.children()`` reads the stat file of every process on the machine each time it
is called: once per kernel, 50 kernels cost 50 full scans. This table lists /proc once per
refresh and reads the stat file only of processes it has not seen (and of those whose parent
exited: the kernel re-parents them). A pid that vanished and came back between two refreshes
would keep its old parent; the start time read with it tells them apart at the next stat read,
and attribution still verifies each matched pid with the GPU driver.

Without /proc (another OS), the psutil functions are used unchanged.
"""

from __future__ import annotations

import os

from jupyter_gpuburst.gpu.attribution import namespace_aliases, process_tree

# (ppid, start time in clock ticks) per pid
_Stat = tuple[int, int]


def _read_stat(proc_root: str, pid: int) -> _Stat | None:
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: fields start after the last ')'
    fields = data[data.rindex(b")") + 2 :].split(b" ", 20)
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


class ProcessTable:
    """Parent links of every visible process, refreshed incrementally; not thread-safe."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self.available = os.path.isdir(proc_root) and os.path.exists(f"{proc_root}/self/stat")
        self._stat: dict[int, _Stat] = {}
        self._children: dict[int, list[int]] = {}
        self._aliases: dict[tuple[int, int], frozenset[int]] = {}
        self._listing: list[str] = []
        self.stat_reads = 0  # for tests and the benchmark: how much work a refresh did

    def refresh(self) -> bool:
        """Bring the table up to date; False when /proc lists exactly the processes it did before.

        (Then every tree and alias read since is still current, and callers may keep what they
        derived from them.) Without /proc it is always True: nothing can be known unchanged.
        """
        if not self.available:
            return True
        try:
            names = os.listdir(self.proc_root)
        except OSError:
            self.available = False
            return True
        if names == self._listing:
            # the same pids in the same order: nobody started or exited (a pid reused between
            # two refreshes shows its new start time at the next stat read, see the module doc)
            return False
        self._listing = names
        live = {int(n) for n in names if n.isdigit()}
        gone = self._stat.keys() - live
        for pid in gone:
            del self._stat[pid]
        reread = live - self._stat.keys()
        if gone:
            # orphans were re-parented when their parent exited
            reread |= {pid for pid, (ppid, _) in self._stat.items() if ppid in gone}
        for pid in reread:
            stat = _read_stat(self.proc_root, pid)
            self.stat_reads += 1
            if stat is None:
                self._stat.pop(pid, None)
            else:
                self._stat[pid] = stat
        if reread or gone:
            children: dict[int, list[int]] = {}
            for pid, (ppid, _) in self._stat.items():
                children.setdefault(ppid, []).append(pid)
            self._children = children
            keep = {(pid, start) for pid, (_, start) in self._stat.items()}
            self._aliases = {k: v for k, v in self._aliases.items() if k in keep}
        return True

    def tree(self, pid: int) -> set[int]:
        """``pid`` and all its descendants, as of the last refresh; empty when it is gone."""
        if not self.available:
            return process_tree(pid)
        if pid not in self._stat:
            return set()
        out, todo = {pid}, [pid]
        while todo:
            for child in self._children.get(todo.pop(), ()):
                if child not in out:
                    out.add(child)
                    todo.append(child)
        return out

    def aliases(self, pid: int) -> set[int]:
        """NSpid of ``pid`` (its pids in every visible namespace), read once per process life."""
        stat = self._stat.get(pid)
        if not self.available or stat is None:
            return namespace_aliases(pid, self.proc_root)
        key = (pid, stat[1])
        cached = self._aliases.get(key)
        if cached is None:
            cached = self._aliases[key] = frozenset(namespace_aliases(pid, self.proc_root))
        return set(cached)
