"""PNG plots of `gpuburst bench trace` (matplotlib, the ``bench`` extra), one file per question."""

from __future__ import annotations

from pathlib import Path
from typing import Any

POLICY_COLORS = {"local-only": "#c0392b", "local-first": "#2471a3", "donor-first": "#7d3c98", "loss": "#229954"}
DPI = 110


def _pyplot():
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise SystemExit("gpuburst bench trace --plots needs matplotlib: pip install 'jupyter-gpuburst[bench]'") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _labels(result: dict[str, Any], mode: str) -> list[tuple[str, str]]:
    return [(k, k.split("/", 1)[1]) for k in result["results"] if k.split("/", 1)[0] == mode]


def write_all(directory: Path, result: dict[str, Any], series: dict[str, Any], week: int) -> list[Path]:
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    modes = sorted({k.split("/", 1)[0] for k in result["results"]}, key=lambda m: (m != "server", m))
    mode = modes[0]
    fed = result["federation"]
    owned = fed["local_gpus"]
    total = owned + sum(fed["donors"].values())
    timeout = result["params"]["start_timeout_s"]
    paths = [
        _wait_cdf(plt, directory, result, series, mode, timeout),
        _refused(plt, directory, result, modes),
        _in_use(plt, directory, result, series, mode, week, owned, total),
        _idle_memory(plt, directory, result, series, mode, week),
        _borrowed(plt, directory, result, modes),
    ]
    if len(modes) > 1:
        paths.append(_held_per_active(plt, directory, result, modes))
    if result.get("culling"):
        paths.append(_culling(plt, directory, result["culling"]))
    return paths


def _culling(plt, directory, culling) -> Path:
    """GPU idle culling of servers: idle GPU-hours held and given back; sessions stopped at work."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 4), gridspec_kw={"width_ratios": [2, 1]})
    held, back = culling["gpu_hours_held_idle"], culling["gpu_hours_given_back"]
    left.bar(["held idle\n(no culling)", "given back\n(culling)"], [held, back], color=["#7f8c8d", "#229954"])
    left.text(1, back, f"{culling['idle_given_back_share']:.0%}", ha="center", va="bottom")
    left.axhline(held / 2, color="grey", linestyle=":", linewidth=1, label="goal: half")
    left.set_ylabel("GPU-hours over the semester")
    left.legend(fontsize=8)
    right.bar(["culled", "while working"], [culling["sessions_culled"], culling["culled_while_working"]], color=["#2471a3", "#c0392b"])
    right.axhline(culling["sessions"] * 0.01, color="grey", linestyle=":", linewidth=1, label="goal: 1 % of sessions")
    right.set_ylabel("sessions")
    right.legend(fontsize=8)
    fig.suptitle(f"GPU idle culling of servers after {culling['timeout_s'] / 60:g} min")
    return _save(plt, fig, directory / "trace-culling.png")


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _wait_cdf(plt, directory, result, series, mode, timeout) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    styles = ["-", "--", "-.", ":"]
    lowest = 1.0
    for i, (label, policy) in enumerate(_labels(result, mode)):
        waits = sorted(series[label]["waits"])
        n = len(waits)
        if not n:
            continue
        # share of requests served within x seconds; starts at x = 0 (no wait at all)
        xs = [0.0, *waits, timeout * 1.5]
        ys = [sum(1 for w in waits if w <= 0) / n, *[(k + 1) / n for k in range(n)], 1.0]
        lowest = min(lowest, ys[0])
        r = result["results"][label]
        ax.step(
            xs,
            ys,
            where="post",
            linestyle=styles[i % len(styles)],
            linewidth=2,
            label=f"{policy}: p95 {r['wait_s']['p95']:g} s, {r['refused']} refused",
            color=POLICY_COLORS.get(policy),
        )
    ax.axvline(timeout, color="grey", linestyle=":", linewidth=1)
    ax.text(timeout, lowest, f" refused after {timeout:g} s", color="grey", fontsize=8, va="bottom")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, timeout * 1.5)
    ax.set_ylim(max(0.0, lowest - 0.1), 1.02)
    ax.set_xlabel("wait from Start to a GPU (s; linear below 1 s, log above)")
    ax.set_ylabel("share of GPU requests served within x")
    ax.set_title(f"Wait-time CDF, {result['params']['students']} students, {mode} mode")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="center right", fontsize=8)
    return _save(plt, fig, directory / "trace-wait-cdf.png")


def _refused(plt, directory, result, modes) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    policies = [p for _, p in _labels(result, modes[0])]
    width = 0.8 / len(modes)
    for j, mode in enumerate(modes):
        values = [result["results"][f"{mode}/{p}"]["refused"] for p in policies]
        xs = [i + j * width for i in range(len(policies))]
        bars = ax.bar(xs, values, width, label=f"{mode} mode")
        for x, v in zip(xs, values, strict=True):
            ax.text(x, v, str(v), ha="center", va="bottom", fontsize=8)
        _ = bars
    ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(policies))], policies)
    ax.set_ylabel("refused GPU requests (waited the full start timeout)")
    ax.set_title("Refused spawns over the semester")
    ax.legend(fontsize=8)
    return _save(plt, fig, directory / "trace-refused.png")


def _week_slice(values: list[float], week: int) -> list[float]:
    start = week * 7 * 24
    return values[start : start + 7 * 24]


def _week_axes(ax: Any, ylabel: str, title: str) -> None:
    """One week's hours on the x axis, Monday to Sunday, with the labels of a week plot."""
    ax.set_xticks(range(0, 7 * 24 + 1, 24), ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", ""])
    ax.set_xlim(0, 7 * 24)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


def _compared(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The runs a week plot compares: local-only and local-first (server mode), local-first (kernel).

    donor-first and loss use as many GPUs as local-first in total (they differ in where).
    """
    wanted = [("server/local-only", "#c0392b", "-"), ("server/local-first", "#2471a3", "-"), ("kernel/local-first", "#229954", "--")]
    return [(k, c, ls) for k, c, ls in wanted if k in result["results"]]


def _in_use(plt, directory, result, series, mode, week, owned, total) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    hours = list(range(7 * 24))
    for label, color, style in _compared(result):
        in_use = series[label]["in_use"]
        summed = [sum(v) for v in zip(*(_week_slice(b, week) for b in in_use.values()), strict=True)]
        ax.plot(hours, summed, label=label.replace("/", " mode, "), color=color, linestyle=style, linewidth=1.3)
    ax.axhline(owned, color="black", linestyle="--", linewidth=1, label=f"owned ({owned})")
    ax.axhline(total, color="grey", linestyle=":", linewidth=1, label=f"owned + donors ({total})")
    _week_axes(ax, "GPUs in use (hourly mean)", f"GPUs in use vs owned, week {week + 1}")
    return _save(plt, fig, directory / "trace-gpus-in-use.png")


def _idle_memory(plt, directory, result, series, mode, week) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    hours = list(range(7 * 24))
    for label, color, style in _compared(result):
        ax.plot(
            hours,
            _week_slice(series[label]["idle_memory_gib"], week),
            label=label.replace("/", " mode, "),
            color=color,
            linestyle=style,
            linewidth=1.3,
        )
    _week_axes(ax, "GPU memory held but unused (GiB, hourly mean)", f"Idle GPU memory (held, not used), week {week + 1}")
    return _save(plt, fig, directory / "trace-idle-memory.png")


def _borrowed(plt, directory, result, modes) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    donors = list(result["federation"]["donors"])
    labels = [k for k in result["results"] if not k.endswith("/local-only")]
    labels.sort(key=lambda k: (modes.index(k.split("/")[0]), k))
    bottom = [0.0] * len(labels)
    for donor in donors:
        values = [result["results"][k]["gpu_hours_borrowed"][donor] for k in labels]
        ax.bar(range(len(labels)), values, bottom=bottom, label=donor)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, b in enumerate(bottom):
        ax.text(i, b, f"{b:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(labels)), [k.replace("/", "\n") for k in labels], fontsize=8)
    ax.set_ylabel("GPU-hours borrowed over the semester")
    ax.set_title("GPU-hours borrowed per donor")
    ax.legend(fontsize=8)
    return _save(plt, fig, directory / "trace-borrowed.png")


def _held_per_active(plt, directory, result, modes) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    values = [result["results"][f"{m}/local-first"]["held_per_active_gpu_hour"] or 0 for m in modes]
    ax.bar(modes, values, color=["#2471a3", "#229954", "#ca6f1e"][: len(modes)])
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom")
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_ylabel("GPU-hours held per GPU-hour computing")
    ax.set_title("Held vs active GPU time (local-first)")
    return _save(plt, fig, directory / "trace-held-per-active.png")
