"""Pure core, no I/O: Liqo facts, the watch-fed inventory and the placement policy."""
