# barrier/: device code only (see README.md); its host side is elastic/runtime_barrier.c.
