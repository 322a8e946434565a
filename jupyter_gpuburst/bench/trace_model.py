"""A semester of GPU notebook use by one course, generated from a few documented parameters.

Where the numbers come from (docs/capacity-study.md has the same list with the reasoning):

- Daily / weekly activity: JupyterHub's own active-user metrics as published for one large
  teaching hub (Jupyter blog, "Accurately counting Daily, Weekly & Monthly active users on
  JupyterHub", 2023: 610 daily, 2,800 weekly, 4,526 monthly active users). A weekly-active
  student is active on about 610 / 2,800 = 22 % of days; ``homework_days_per_week`` = 7 × 0.22
  ≈ 1.5 is taken from that ratio.
- Shape of the day and week: LON-CAPA's published usage of Michigan State University's online
  course system (fall 2003): little use from 5:30 to 8:00, the day's peak in the late evening
  (around 22:00), Saturday the quietest day. ``hour_weights`` and ``weekday_weights`` follow
  that shape; the exact heights are an assumption.
- Semester length: Berkeley DataHub's usage analysis counts a fall semester as 15 August to
  15 December (17 weeks); 15 teaching weeks is the default (assumption: exam weeks removed).
- Lab sessions, session lengths, the profile mix, the busy share within a session and GPU
  memory use are assumptions (no public JupyterHub report gives them for GPU courses); each is
  a parameter, and the study can be re-run with other values.
- Waiting: a spawn waits at most the spawner's ``start_timeout`` (300 s, z2jh's default
  ``singleuser.startTimeout``; JupyterHub's own is 60 s); GPUBurstSpawner's queue waits the
  same. A request still queued then is refused.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

HOUR = 3600.0
DAY = 24 * HOUR
WEEK = 7 * DAY


@dataclass(frozen=True)
class TraceParams:
    students: int = 120
    weeks: int = 15
    seed: int = 2026
    # Lab sections: (weekday 0=Mon, start hour, share of the class). Two sections of half a class.
    lab_sections: tuple[tuple[int, float, float], ...] = ((1, 14.0, 0.5), (3, 14.0, 0.5))
    lab_length_h: float = 2.0
    lab_attendance: float = 0.9
    # Students press Start within the first minutes of a lab: exponential with this mean.
    lab_arrival_mean_min: float = 4.0
    # Outside labs: sessions per student per week (610 / 2,800 daily/weekly active × 7 days).
    homework_days_per_week: float = 1.5
    # Busier before the weekly deadline (Friday 23:59): weight of each weekday.
    weekday_weights: tuple[float, ...] = (1.0, 1.1, 1.2, 1.6, 1.4, 0.5, 0.8)
    # Hour of day: quiet at night and early morning, rising to a late-evening peak.
    hour_weights: tuple[float, ...] = (
        0.6,
        0.3,
        0.15,
        0.1,
        0.05,
        0.05,
        0.05,
        0.1,
        0.3,
        0.6,
        0.8,
        0.9,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        1.1,
        1.3,
        1.5,
        1.6,
        1.2,
    )
    # Session length: lognormal; median and spread in log space; capped like an idle culler's max age.
    session_median_min: float = 75.0
    session_sigma: float = 0.7
    session_cap_h: float = 8.0
    # GPUs per session: share of each profile (1, 2 or 4 GPUs).
    profile_mix: tuple[tuple[int, float], ...] = ((1, 0.85), (2, 0.12), (4, 0.03))
    # Within a session: alternating idle and busy periods (exponential), busy share below.
    busy_share: float = 0.3
    busy_period_mean_min: float = 6.0
    # GPU memory of one GPU, and what a session actually uses (lognormal median, GiB).
    gpu_memory_gib: float = 40.0
    memory_used_median_gib: float = 6.0
    # The longest a spawn waits in the queue before it is refused (KubeSpawner start_timeout).
    start_timeout_s: float = 300.0

    def validate(self) -> None:
        if self.students < 1 or self.weeks < 1:
            raise ValueError("students and weeks must be at least 1")
        if len(self.weekday_weights) != 7 or len(self.hour_weights) != 24:
            raise ValueError("weekday_weights needs 7 values and hour_weights 24")
        if not 0 < self.busy_share <= 1:
            raise ValueError("busy_share must be in (0, 1]")
        if abs(sum(p for _, p in self.profile_mix) - 1.0) > 1e-6:
            raise ValueError("profile_mix shares must sum to 1")


@dataclass(frozen=True)
class Session:
    """One student's server session: when, how long, how many GPUs, and when it computes."""

    sid: int
    user: str
    start: float
    length: float
    gpus: int
    memory_used_gib: float
    # (offset from start, length) of each busy period, in seconds
    busy: tuple[tuple[float, float], ...] = field(default=())
    lab: bool = False


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return math.exp(rng.gauss(math.log(median), sigma))


def _weighted_choice(rng: random.Random, weights: tuple[float, ...]) -> int:
    total = sum(weights)
    x = rng.random() * total
    for i, w in enumerate(weights):
        x -= w
        if x < 0:
            return i
    return len(weights) - 1


def _busy_periods(rng: random.Random, length: float, p: TraceParams) -> tuple[tuple[float, float], ...]:
    """Alternating idle/busy periods over ``length``; a session starts idle (reading, editing)."""
    busy_mean = p.busy_period_mean_min * 60
    idle_mean = busy_mean * (1 - p.busy_share) / p.busy_share if p.busy_share < 1 else 0.0
    out, t = [], 0.0
    while t < length:
        t += rng.expovariate(1 / idle_mean) if idle_mean > 0 else 0.0
        if t >= length:
            break
        b = min(rng.expovariate(1 / busy_mean), length - t)
        out.append((t, b))
        t += b
    return tuple(out)


def generate(p: TraceParams) -> list[Session]:
    """Every session of the semester, sorted by start time; the same list for the same params."""
    p.validate()
    rng = random.Random(p.seed)
    users = [f"student{i:03d}" for i in range(p.students)]
    raw: list[tuple[float, str, float, bool]] = []

    # labs: each section's students (a fixed split of the class) arrive at the start
    order = list(users)
    rng.shuffle(order)
    sections, at = [], 0
    for weekday, hour, share in p.lab_sections:
        n = round(share * p.students)
        sections.append((weekday, hour, order[at : at + n]))
        at += n
    for week in range(p.weeks):
        for weekday, hour, members in sections:
            t0 = week * WEEK + weekday * DAY + hour * HOUR
            for user in members:
                if rng.random() < p.lab_attendance:
                    start = t0 + rng.expovariate(1 / (p.lab_arrival_mean_min * 60))
                    end = t0 + p.lab_length_h * HOUR
                    raw.append((start, user, max(600.0, end - start + rng.uniform(-600, 600)), True))

    # homework: Poisson count per student and week, placed by weekday and hour weights
    for week in range(p.weeks):
        for user in users:
            n = _poisson(rng, p.homework_days_per_week)
            for _ in range(n):
                day = _weighted_choice(rng, p.weekday_weights)
                hour = _weighted_choice(rng, p.hour_weights)
                start = week * WEEK + day * DAY + (hour + rng.random()) * HOUR
                length = min(_lognormal(rng, p.session_median_min * 60, p.session_sigma), p.session_cap_h * HOUR)
                raw.append((start, user, length, False))

    raw.sort(key=lambda r: (r[0], r[1]))
    # one server per student (JupyterHub's default): a session overlapping the student's previous
    # one is dropped rather than merged
    busy_until: dict[str, float] = {}
    kept = []
    for start, user, length, lab in raw:
        if start < busy_until.get(user, float("-inf")):
            continue
        busy_until[user] = start + length
        kept.append((start, user, length, lab))
    raw = kept
    counts = tuple(c for c, _ in p.profile_mix)
    shares = tuple(s for _, s in p.profile_mix)
    sessions = []
    for sid, (start, user, length, lab) in enumerate(raw):
        gpus = counts[_weighted_choice(rng, shares)]
        memory = min(_lognormal(rng, p.memory_used_median_gib, 0.6) * gpus, gpus * p.gpu_memory_gib)
        sessions.append(Session(sid, user, start, length, gpus, memory, _busy_periods(rng, length, p), lab))
    return sessions


def _poisson(rng: random.Random, mean: float) -> int:
    # Knuth's method: small means only, which is all a week of one student needs
    limit, k, prod = math.exp(-mean), 0, rng.random()
    while prod > limit:
        k += 1
        prod *= rng.random()
    return k
