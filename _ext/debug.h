/* FASTCOORD_DEBUG is set by setup.py: 1 in a debug build (FASTCOORD_DEBUG_BUILD=1), else 0. */
#ifndef FASTCOORD_DEBUG
#define FASTCOORD_DEBUG 0
#endif
