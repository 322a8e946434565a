"""What students and admins read: one name per GPU resource and per site, everywhere.

The form, the spawn page, the Lab panel, the capacity page and the docs all name things through
these functions, so a MIG slice is a "MIG 1g.10gb slice" in every place and a donor is called by
its name ("donor-1"), never "donor donor-1". Raw resource names stay available as a detail.
"""

from __future__ import annotations

import re

from .keys import ORIGIN_SITE

WHOLE_GPU = frozenset({"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe"})
_MIG = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb(?:\.[a-z0-9+]+)?)$")


def gpu_name(resource: str) -> str:
    """The friendly name of one unit of ``resource``: "GPU", "MIG 1g.10gb slice", or as given."""
    if resource in WHOLE_GPU:
        return "GPU"
    mig = _MIG.match(resource)
    if mig:
        return f"MIG {mig.group('profile')} slice"
    return resource


def _plural(name: str) -> str:
    if name in ("GPU",) or name.endswith(" slice"):
        return name + "s"
    return name  # an unknown resource name is shown exactly as the cluster spells it


def gpu_amount(resource: str, count: int) -> str:
    """``count`` units of ``resource`` in words: "1 GPU", "2 GPUs", "3 MIG 1g.10gb slices"."""
    name = gpu_name(resource)
    return f"{count} {name if count == 1 else _plural(name)}"


def gpu_units(resource: str, count: int) -> str:
    """Just the unit word for ``count``: "GPU", "GPUs", "MIG 1g.10gb slices"."""
    name = gpu_name(resource)
    return name if count == 1 else _plural(name)


def site_name(site: str) -> str:
    """How a site is named in a sentence: "the origin", or the donor's own name."""
    return "the origin" if site == ORIGIN_SITE else site


def plural(count: int, word: str, words: str | None = None) -> str:
    """ "1 GPU", "2 GPUs": a count with the right form of ``word``."""
    return f"{count} {word if count == 1 else (words or word + 's')}"
