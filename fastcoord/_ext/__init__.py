"""Compiled Cython modules, built by setup.py from the sources in the top-level _ext/ folder.

Nothing here is imported directly: fastcoord._accel picks a compiled module or its
pure-Python twin.
"""
