"""Continuous watch of a dataset tree or an S3 prefix (``ckptrescue watch``).

:mod:`state` keeps what was seen and checked in SQLite (bounded memory, survives restarts);
:mod:`passes` runs one incremental pass (new and changed files only, by size + mtime + inode,
or by listing deltas for object stores) and turns what it finds into findings (WA0xx);
:mod:`alerts` posts findings to a webhook and writes Prometheus textfile metrics;
:mod:`local` turns inotify events (watchdog) into the paths the next pass checks.
"""
