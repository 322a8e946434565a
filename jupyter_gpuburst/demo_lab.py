"""The lab `gpuburst demo` has booked, so that the labs page has something to show.

A teacher books through the labs page; the demo instead writes its one booking into the
bookings' file before its hub starts (the hub reads bookings from there when it opens them),
for the class ``demo_config.py`` makes. It starts an hour after the demo does: the page shows
it, and nothing is held from the demo's students until its warm-up begins.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from pathlib import Path

from jupyter_gpuburst.hub.labs.model import CANCELLED, Booking
from jupyter_gpuburst.hub.labs.settings import STORE_FILE
from jupyter_gpuburst.hub.labs.store import LabStore

TITLE = "ML-101"
GROUP = "ml-101"
# demo_config.py's members of the class (the banner's students) and the profile they book
MEMBERS = ("student1", "student2")
PROFILE = ("gpu-1", "nvidia.com/gpu", 1)
STARTS_IN = dt.timedelta(hours=1)
LASTS = dt.timedelta(hours=1)


def booked_lab(state: Path, teacher: str, now: dt.datetime | None = None) -> Booking:
    """The demo's lab in ``state``'s bookings: the one a reused ``--state-dir`` still has to come
    (or runs now), else a new one from an hour from ``now``."""
    now = now or dt.datetime.now(dt.UTC)
    store = LabStore(state / STORE_FILE)
    try:
        for booking in store.bookings():
            if booking.title == TITLE and booking.status != CANCELLED and booking.end > now:
                return booking
        start = (now + STARTS_IN).replace(second=0, microsecond=0)
        slug, resource, gpus = PROFILE
        lab = Booking(
            id=secrets.token_hex(6),
            title=TITLE,
            teacher=teacher,
            group=GROUP,
            profile=slug,
            resource=resource,
            gpus=gpus,
            students=len(MEMBERS),
            start=start,
            end=start + LASTS,
            created=time.time(),
        )
        return store.add(lambda others: lab)
    finally:
        store.close()
