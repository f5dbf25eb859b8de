# barrier/: device code only (see README.md); its host side is elastic/runtime/runtime_barrier.c.
