"""Host-side collection for an incident: logs and scheduler/orchestration state, read only.

:mod:`host` plans the tool runs (journal window, kernel ring buffer, Slurm, Kubernetes — only
the read forms the guard allows) and reads log files (syslog, messages, kern.log, slurmd logs,
training-job logs, raw CloudTrail files) into artifacts, bounded, never touching the originals.
"""
