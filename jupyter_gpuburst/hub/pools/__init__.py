"""Warm pools: low-priority placeholder pods per site and profile that pull the profile's image and
hold capacity until a real server or kernel preempts them (docs/warm-pools.md)."""
