"""Tests of fastcoord.security."""
