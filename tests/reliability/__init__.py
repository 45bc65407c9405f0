"""Reliability suite: crashes, corruption, full disks, hostile input, bad campaign files.

The fault generators live in modules of this package (``broken_specs``, ...) so that
``bench/faults.py`` runs the same faults at a larger N.
"""
