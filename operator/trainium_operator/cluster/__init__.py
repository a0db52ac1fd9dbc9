"""Thin cluster I/O: client calls, reads from watches, observe, actions, FSx, one pass."""
