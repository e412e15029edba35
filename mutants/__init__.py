"""Deliberately broken variants of the reference runtime (DESIGN §7)."""
